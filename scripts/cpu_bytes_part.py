"""Rule `cpu_bytes_part`: measured vs modelled bytes of both references, one dtype, forward and
(for the dtypes of cpu.backward) backward."""


import pandas as pd
import torch

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.cpu import bytecount
from minimodel.floor import contract
from minimodel.floor.provenance import project
from minimodel.floor.provenance.io import write_csv
from minimodel.floor.provenance.manifest import stage

with stage(snakemake) as st:
    cfg = snakemake.params.cfg
    dtype = snakemake.wildcards.dtype
    project.check_memory(bytecount.memory_needed(cfg["n"]))
    if cfg["threads"]:
        torch.set_num_threads(cfg["threads"])
    tiles = cfg["block_r"], cfg["block_c"], cfg["sram_bytes"], cfg["profiler_max_n"]
    rows = bytecount.sweep(
        cfg["n"], cfg["head_dims"], [dtype], *tiles,
        random_seed=snakemake.params.random_seed, progress=st.progress,
    )
    bwd = cfg["backward"]
    if dtype in bwd["dtypes"]:
        rows += bytecount.sweep(
            bwd["n"], bwd["head_dims"], [dtype], *tiles,
            random_seed=snakemake.params.random_seed, progress=st.progress, direction=contract.BACKWARD,
        )
    table = pd.DataFrame(rows)
    st.extra["worst_abs_deviation"] = float(table["deviation"].abs().max())
    write_csv(snakemake.output.table, table)
