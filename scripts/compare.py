"""Rule `compare`: this run against the reference run. It writes comparison.csv, verdict.json and
comparison.png whatever the verdict and succeeds (Snakemake would delete a failed job's outputs);
rule compare_verdict then fails the run on a disagreement when the config asks for it."""

from pathlib import Path

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.floor.provenance.manifest import stage
from minimodel.report import compare

with stage(snakemake) as st:
    if snakemake.params.reference is None:
        raise SystemExit("compare.reference is null in the config: there is no run to compare with")
    run = Path(snakemake.output.table).parent.parent
    try:
        table, verdict = compare.compare_runs(run, snakemake.params.reference)
    except compare.RunError as err:  # a tampered run or reference, or a table that cannot be read
        raise SystemExit(f"rule compare: {err}") from None
    compare.write(table, verdict, Path(snakemake.output.table).parent)
    st.extra.update(verdict=verdict["verdict"], parts=verdict["parts"])
    print(compare.summary_text(verdict) + f"\n  every row: {snakemake.output.table}")
