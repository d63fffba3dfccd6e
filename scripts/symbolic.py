"""Rule `symbolic`: the byte model's tidy table, its closed forms and the lab's printed table."""

import pandas as pd

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel import symbolic, symbolic_backward
from minimodel.provenance.io import write_csv, write_text
from minimodel.provenance.manifest import stage

with stage(snakemake):
    cfg = snakemake.params.cfg
    grid = cfg["n"], cfg["head_dims"], cfg["tiles"], cfg["dtypes"]
    # the forward's rows, then the backward's and forward + backward's (the `direction` column)
    write_csv(snakemake.output.table, pd.concat(
        [symbolic.byte_table(*grid, schemes=symbolic.SCHEMES), symbolic_backward.byte_table(*grid)],
        ignore_index=True,
    ))
    write_csv(snakemake.output.formulas, symbolic.formulas_table())
    write_csv(snakemake.output.backward_formulas, symbolic_backward.formulas_table())
    # the lab's points, tile and dtype (contract.LAB_*), the cache sizes the model assumes
    table = symbolic.lab_table(l1_bytes=cfg["l1_bytes"], l2_bytes=cfg["l2_bytes"])
    text = symbolic.format_lab_table(table)
    print(text)
    write_text(snakemake.output.lab_table, text)
