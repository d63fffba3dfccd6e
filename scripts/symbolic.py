"""Rule `symbolic`: the byte model's tidy table, its closed forms and the lab's printed table."""


import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel import symbolic
from minimodel.floor.provenance.io import write_csv, write_text
from minimodel.floor.provenance.manifest import stage

with stage(snakemake):
    cfg = snakemake.params.cfg
    grid = cfg["n"], cfg["head_dims"], cfg["tiles"], cfg["dtypes"]
    # the forward's rows, then the backward's and forward + backward's (the `direction` column)
    write_csv(snakemake.output.table, symbolic.tidy_table(*grid))
    write_csv(snakemake.output.formulas, symbolic.formulas_table())
    write_csv(snakemake.output.backward_formulas, symbolic.backward_formulas_table())
    # the lab's points, tile and dtype (contract.LAB_*), the cache sizes the model assumes
    table = symbolic.lab_table(l1_bytes=cfg["l1_bytes"], l2_bytes=cfg["l2_bytes"])
    text = symbolic.format_lab_table(table)
    print(text)
    write_text(snakemake.output.lab_table, text)
