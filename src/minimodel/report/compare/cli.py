"""Compare a run of the workflow with a reference run: what should agree, within stated tolerances.

    python -m minimodel compare results/                       # against the committed H200 reference
    python -m minimodel compare results/h200-rerun results/reference/nvidia-h200 --out cmp/

Each part is judged by what should travel between machines (paths: `minimodel.floor.contract`):
- symbolic (`symbolic/`): the closed forms and their tables are exact: identical.
- CPU bytes (`cpu/bytes.csv`): the instrumented counts and the model do not depend on the
  machine: identical. torch.profiler's allocated bytes within PROFILER_TOLERANCE.
- correctness (`gpu/correctness/`): every case's verdict equal, the errors side by side; a run
  under the interpreter and one on CUDA check different grids: not comparable.
- timing (`gpu/timing/`): on the same GPU model, the ratios that should travel (kernel against
  SDPA's cuDNN and FlashAttention-2 backends, against naive PyTorch, against each contender), and
  first their families' geometric means (per pass, grid, d and ratio). A ratio disagrees when its
  change is beyond its band (`bands`, derived from two H200 runs) and, where both runs hold 10
  samples of it or more, significant (`stats`: Welch on the log samples, Holm over the run); a run
  without samples, fewer, or damaged ones: beyond max(band, 10 %). The same non-ok status on both
  sides agrees, a changed one disagrees ("status differs"). On another GPU, or without one, not
  comparable.
- GPU bytes (`gpu/bytes/`): on the same GPU model, DRAM reads and bytes stored into the L2
  within GPU_BYTES_TOLERANCE, a point not measured in both runs by its status (the same one agrees,
  a changed one disagrees); on another GPU, or without one, not comparable.
- decode (`symbolic/decode/`, `cpu/decode/`, `gpu/decode/`): the model's rows and the CPU's
  counted bytes identical; each GPU row's status equal; on the same GPU model, each timed point's
  GB/s within 10 % (`decode.GBS_TOLERANCE`). A run made before decode has none of its tables: not
  comparable, named.
- inputs: per rule, which code, parameters and environment differ between the two manifests,
  so that a reader sees why numbers moved. Expected between two runs; informational, never a
  failure.
Every table part is judged per pass (`direction`: the forward, the backward alone, the two
together) by the same rules (timing's bands differ by pass on FlashAttention's grid); a table
without the column (a run made before the backward) is all forward, and a pass only one run holds
is not comparable, with the reason.
The machine's own ceilings (the roofline) are not compared.

Both folders are first checked against their own manifests (`minimodel.report.runs`).
Writes `comparison.csv` (one row per judged number, its `rule` the way it was judged),
`verdict.json` and `comparison.png` whatever the verdict, then prints a summary of a few lines and
where it wrote them: --out, else RUN/compare-<the reference's folder name> (`default_out`), beside
the workflow's own comparison, RUN/compare, which its rule wrote and its manifest vouches for, so
the two never meet; a run that is a committed reference is read, never written, and its comparison
goes to a new temporary folder. The verdict is "agree" (exit 0: not comparable is not a failure),
"disagree" when something that should agree does not, or "nothing compared" when no number could
be compared at all (exit 1 for both); a folder that cannot be compared, or an --out inside a
committed reference or holding a rule's outputs (the run's own compare/), exits 2.
docs/reproducing.md says how the timing verdict decides.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from minimodel.floor import commands, contract
from minimodel.floor.provenance import project
from minimodel.report import runs
from minimodel.report.compare.figure import write
from minimodel.report.compare.rows import AGREE
from minimodel.report.compare.verdict import compare_runs, summary_text
from minimodel.report.runs import REFERENCE, RunError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the results folder of a run")
    parser.add_argument("reference", nargs="?", default=str(REFERENCE),
                        help=f"the run to compare against (default {REFERENCE})")
    parser.add_argument("--out", help="where to write comparison.csv, verdict.json, comparison.png "
                                      f"(default: RUN/{contract.COMPARE}-<REFERENCE's folder name>, beside "
                                      f"the workflow's own RUN/{contract.COMPARE}; a temporary folder when "
                                      "RUN is a committed reference)")


def default_out(run: str | os.PathLike, reference: str | os.PathLike) -> Path:
    """Where a comparison without --out goes: RUN/compare-<the reference's folder name>, never the
    workflow's RUN/compare; a new temporary folder when RUN is a committed reference (read, never
    written)."""
    run, reference = Path(run).resolve(), Path(reference).resolve()
    if project.inside(run, runs.committed_references()):
        return Path(tempfile.mkdtemp(prefix=f"minimodel-compare-{run.name}-{reference.name}-"))
    return run / f"{contract.COMPARE}-{reference.name}"


def run(args: argparse.Namespace) -> int:
    try:
        # resolved before anything is read: a relative --out, `..` or a symlink cannot slip in
        out = runs.check_writable(args.out) if args.out else None
        table, verdict = compare_runs(args.run, args.reference)
        out = out or runs.check_writable(default_out(args.run, args.reference))
    except RunError as err:
        print(f"compare: {err}", file=sys.stderr)
        return 2
    write(table, verdict, out)
    print(summary_text(verdict))
    print(f"  written to {out}: comparison.csv (every row), verdict.json, comparison.png")
    return 0 if verdict["verdict"] == AGREE else 1


def main(argv: list[str] | None = None) -> int:
    """`python -m minimodel compare`."""
    return commands.main("compare", sys.modules[__name__], argv)
