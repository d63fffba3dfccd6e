"""Rule `decode_symbolic`: decode's model rows on the config's decode grid, and its closed forms."""

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel import symbolic
from minimodel.floor import decode_grid
from minimodel.floor.provenance.io import write_csv
from minimodel.floor.provenance.manifest import stage

with stage(snakemake) as st:
    table = symbolic.decode_table(snakemake.params.cfg)
    st.extra["points"] = int(len(table.drop_duplicates(list(decode_grid.KEY))))
    write_csv(snakemake.output.table, table)
    write_csv(snakemake.output.formulas, symbolic.decode_formulas_table())
