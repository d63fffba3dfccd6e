"""Rule `compare`: this run against the reference run; a disagreement fails the rule after writing."""

from pathlib import Path

from minimodel.provenance.io import write_csv
from minimodel.provenance.manifest import stage
from minimodel.report import compare

with stage(snakemake) as st:
    if snakemake.params.reference is None:
        raise SystemExit("compare.reference is null in the config: there is no run to compare with")
    run = Path(snakemake.output.table).parent.parent
    table, verdict = compare.compare_runs(run, snakemake.params.reference)
    compare.write(table, verdict, Path(snakemake.output.table).parent)
    write_csv(snakemake.log.table, table)
    st.extra.update(verdict=verdict["verdict"], parts=verdict["parts"])
    print(compare.summary_text(verdict))
    if verdict["verdict"] == compare.DISAGREE:
        raise SystemExit(compare.summary_text(verdict) + f"\nevery number is in {snakemake.log.table}")
