"""Rule `gpu_bytes`: DRAM bytes of naive, flash and the contenders read with Nsight Compute; planned
points without it."""

import sys
import tempfile
from pathlib import Path

import pandas as pd
import torch

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.contenders import registry
from minimodel.floor.provenance import machine
from minimodel.floor.provenance.io import write_csv, write_json
from minimodel.floor.provenance.manifest import stage
from minimodel.gpu import hbm, hbm_plan
from minimodel.gpu import ncu as ncu_tool

with stage(snakemake) as st:
    cfg, l2_bytes = snakemake.params.cfg, snakemake.params.l2_bytes
    if machine.gpu_required(snakemake.params.require_cuda):
        machine.require_cuda()
    contenders = registry.from_params(snakemake.params.contenders)
    kernels = pd.DataFrame(columns=ncu_tool.KERNEL_COLUMNS)
    ncu = ncu_tool.find_ncu(cfg["ncu"]) if torch.cuda.is_available() else None
    if ncu is None:
        reason = hbm.NO_NCU if torch.cuda.is_available() else hbm.NO_CUDA
        rows = hbm_plan.planned_rows(cfg, l2_bytes, reason, contenders)
    else:
        with tempfile.TemporaryDirectory() as work:
            try:
                rows, kernels = hbm.measure(cfg, l2_bytes, snakemake.params.random_seed, ncu, work,
                                            contenders)
            finally:  # ncu's own output, each profiled process's, kept in the rule's log
                for log in sorted(Path(work).glob("*.log"), key=lambda p: p.stat().st_mtime):
                    print(log.read_text(), file=sys.stderr)
    table = pd.DataFrame(rows)
    summary = hbm.summary(table, ncu, l2_bytes)
    st.extra.update(status=summary["status"], ncu=summary["ncu"])
    if not summary["measured"]:  # said on the console where it happens, not only in the log
        print(f"gpu_bytes: {summary['status']}; {snakemake.output.table} lists the {len(table)} "
              "planned points", file=st.progress)
    write_csv(snakemake.output.table, table)
    write_csv(snakemake.output.kernels, kernels)
    write_json(snakemake.output.summary, summary)
