"""Rule `cpu_bytes`: one tidy table of the measured bytes of every dtype."""

import pandas as pd

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.floor.provenance.io import write_csv
from minimodel.floor.provenance.manifest import stage

with stage(snakemake) as st:
    table = pd.concat([pd.read_csv(p) for p in snakemake.input.parts], ignore_index=True)
    st.extra["worst_abs_deviation"] = float(table["deviation"].abs().max())
    write_csv(snakemake.output.table, table)
