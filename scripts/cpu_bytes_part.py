"""Rule `cpu_bytes_part`: measured vs modelled bytes of both references, one dtype."""


import pandas as pd
import torch

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.cpu import bytecount
from minimodel.provenance import project
from minimodel.provenance.io import write_csv
from minimodel.provenance.manifest import stage

with stage(snakemake) as st:
    cfg = snakemake.params.cfg
    project.check_memory(bytecount.memory_needed(cfg["n"]))
    if cfg["threads"]:
        torch.set_num_threads(cfg["threads"])
    rows = bytecount.sweep(
        cfg["n"], cfg["head_dims"], [snakemake.wildcards.dtype], cfg["block_r"], cfg["block_c"],
        cfg["sram_bytes"], cfg["profiler_max_n"], random_seed=snakemake.params.random_seed,
        progress=st.progress,
    )
    table = pd.DataFrame(rows)
    st.extra["worst_abs_deviation"] = float(table["deviation"].abs().max())
    write_csv(snakemake.output.table, table)
