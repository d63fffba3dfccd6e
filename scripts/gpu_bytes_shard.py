"""Rule `gpu_bytes_shard`: one shard of the DRAM-bytes stage (minimodel.gpu.shards): naive's, the
kernel's and the contenders' bytes read with Nsight Compute at its rows; its planned rows without
it (where no GPU can be, without importing torch: floor/provenance/devices.py)."""

import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.contenders import registry
from minimodel.floor.provenance import devices, machine
from minimodel.floor.provenance.manifest import stage
from minimodel.gpu import device_slots, hbm_plan, shards_gather
from minimodel.gpu import ncu as ncu_tool

with stage(snakemake) as st:
    started = time.monotonic()
    held = device_slots.claim(device_slots.MEASURING, progress=st.progress)  # before CUDA starts
    cfg, l2_bytes = snakemake.params.cfg, snakemake.params.l2_bytes
    if machine.gpu_required(snakemake.params.require_cuda):
        machine.require_cuda()
    contenders = registry.from_params(snakemake.params.contenders)
    kernels = pd.DataFrame(columns=ncu_tool.KERNEL_COLUMNS)
    cuda = devices.cuda_available()
    ncu = ncu_tool.find_ncu(cfg["ncu"]) if cuda else None
    if ncu is None:
        reason = hbm_plan.NO_NCU if cuda else hbm_plan.NO_CUDA
        rows = hbm_plan.planned_rows(cfg, l2_bytes, reason, contenders)
    else:
        from minimodel.gpu import hbm  # torch's: measured on the device

        with tempfile.TemporaryDirectory() as work:
            try:
                rows, kernels = hbm.measure(cfg, l2_bytes, snakemake.params.random_seed, ncu, work,
                                            contenders)
            finally:  # ncu's own output, each profiled process's, kept in the rule's log
                for log in sorted(Path(work).glob("*.log"), key=lambda p: p.stat().st_mtime):
                    print(log.read_text(), file=sys.stderr)
    summary = hbm_plan.summary(pd.DataFrame(rows), ncu, l2_bytes)
    st.extra.update(status=summary["status"], ncu=summary["ncu"])
    if held is not None:
        st.extra["gpu_slot"] = held.record()
    order = [index for index, _ in hbm_plan.plan_indexed(cfg, l2_bytes, contenders)]
    shards_gather.write_shard(snakemake.output.shard, {
        "selection": cfg["shard"], "rows": rows, "order": order, "summary": summary,
        "kernels": kernels.astype(object).where(kernels.notna(), None).to_dict("records"),
        "gpu_slot": None if held is None else held.record(), "wall_s": round(time.monotonic() - started, 1)})
