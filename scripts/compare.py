"""Rule `compare`: this run against the reference run; a disagreement fails the rule after writing."""

from pathlib import Path

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.provenance.io import write_csv
from minimodel.provenance.manifest import stage
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
    write_csv(snakemake.log.table, table)
    st.extra.update(verdict=verdict["verdict"], parts=verdict["parts"])
    print(compare.summary_text(verdict))
    if verdict["verdict"] != compare.AGREE:  # a disagreement, or nothing compared at all
        raise SystemExit(compare.summary_text(verdict) + f"\nevery number is in {snakemake.log.table}")
