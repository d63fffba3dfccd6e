"""Rule `compare_verdict`: fails the run, in a few lines, when compare's verdict is not agree and
compare.fail_on_disagree is true; compare's outputs are already written and stay."""

from pathlib import Path

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.report import compare

passed, message = compare.gate(snakemake.input.verdict, snakemake.params.fail)
Path(snakemake.log[0]).write_text(message + "\n")
if not passed:
    raise SystemExit(message)
Path(snakemake.output[0]).write_text(message + "\n")
