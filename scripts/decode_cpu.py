"""Rule `decode_cpu`: the counted bytes of the naive decode and the split-KV reference beside the model."""

import pandas as pd
import torch

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.cpu import decode
from minimodel.floor import decode_grid
from minimodel.floor.provenance.io import write_csv
from minimodel.floor.provenance.manifest import stage

with stage(snakemake) as st:
    cfg, cpu = snakemake.params.cfg, snakemake.params.cpu
    if cpu["threads"]:
        torch.set_num_threads(cpu["threads"])
    points = decode_grid.points(cfg["cpu"], cfg["max_cache_bytes"])
    rows = decode.sweep(points, cfg["cpu"]["splits"], cfg["cpu"]["block_n"], cpu["sram_bytes"],
                        random_seed=snakemake.params.random_seed, progress=st.progress)
    table = pd.DataFrame(rows)
    st.extra["worst_abs_deviation"] = float(table["deviation"].abs().max()) if len(table) else None
    write_csv(snakemake.output.table, table)
