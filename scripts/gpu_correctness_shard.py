"""Rule `gpu_correctness_shard`: one shard of the kernel's sweep (minimodel.gpu.shards), forward and
backward, and the contenders'; its rows are written, then a failure of the kernel fails the rule."""

import sys
import time

import pandas as pd

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.contenders import registry
from minimodel.floor import contract
from minimodel.floor.provenance import machine
from minimodel.floor.provenance.io import write_csv
from minimodel.floor.provenance.manifest import stage
from minimodel.gpu import correctness, device_slots, shards_gather

with stage(snakemake) as st:
    started = time.monotonic()
    held = device_slots.claim(device_slots.SWEEP, progress=st.progress)  # before CUDA starts
    cfg = snakemake.params.cfg
    # with require_cuda, a machine without a usable GPU is an error, not the interpreter
    backend = correctness.select_backend(machine.gpu_required(snakemake.params.require_cuda))
    random_seed = snakemake.params.random_seed
    # the kernel's rows, then the contenders'; a contender that fails never fails the rule
    rows, order = correctness.run_shard(cfg, backend, random_seed,
                                        registry.from_params(snakemake.params.contenders),
                                        progress=st.progress, selection=cfg["shard"])
    st.extra.update(backend=backend)
    if held is not None:
        st.extra["gpu_slot"] = held.record()
    table = pd.DataFrame(rows).assign(backend=backend)
    write_csv(snakemake.log.table, table)  # Snakemake deletes a failed job's outputs, not its logs
    shards_gather.write_shard(snakemake.output.shard, {
        "selection": cfg["shard"], "backend": backend, "rows": rows, "order": order,
        "device_l2_bytes": machine.device_l2_bytes() if backend == "cuda" else None,
        "gpu_slot": None if held is None else held.record(), "wall_s": round(time.monotonic() - started, 1)})
    failed = [r for r in rows if r.get("impl") == contract.TRITON and r["passed"] is False]
    if failed:
        print(pd.DataFrame(failed).to_string(), file=sys.stderr)
        raise SystemExit(f"{len(failed)} correctness cases of the kernel failed; every case is in "
                         f"{snakemake.log.table}")
