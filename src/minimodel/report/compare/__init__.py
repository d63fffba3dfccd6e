"""Compare a run of the workflow with a reference run (`python -m minimodel compare`; `cli` says
what each part judges and how).

One module per compared part: `symbolic`, `cpu_bytes`, `correctness`, `timing`, `gpu_bytes`,
`inputs`, each listed in `verdict.PARTS` (what a part module holds: `verdict`'s docstring). The
timing part's pieces: `ratios` (a run's ratios and statuses), `samples` (a run's samples, checked),
`bands` (the bands, derived from real runs), `stats` (the significance test and its correction),
`families` (the geometric means per pass, grid, d and ratio). Around them: `rows` (the table's
columns, verdict words and the judgements parts share), `verdict` (the parts run in order, and the
verdict over their rows), `figure` (comparison.png, and the writing of the three files), `cli` (the
command). A new stage's part is one new module, listed in PARTS.
"""

from minimodel.report.compare.cli import main
from minimodel.report.compare.cpu_bytes import PROFILER_TOLERANCE
from minimodel.report.compare.figure import figure, write
from minimodel.report.compare.gpu_bytes import GPU_BYTES_TOLERANCE
from minimodel.report.compare.rows import AGREE, COLUMNS, DIFFERS, DISAGREE, NOT_COMPARABLE
from minimodel.report.compare.timing import RATIOS, timing_band
from minimodel.report.compare.verdict import NOTHING, PARTS, compare_runs, gate, summary_text
from minimodel.report.runs import REFERENCE, RunError

__all__ = ["AGREE", "COLUMNS", "DIFFERS", "DISAGREE", "GPU_BYTES_TOLERANCE", "NOTHING", "NOT_COMPARABLE",
           "PARTS", "PROFILER_TOLERANCE", "RATIOS", "REFERENCE", "RunError", "compare_runs", "figure",
           "gate", "main", "summary_text", "timing_band", "write"]
