"""Rule `gpu_timing_shard`: one shard of the timing stage (minimodel.gpu.shards), the kernel against
naive, SDPA's backends and the contenders at its passes; its planned passes without a GPU (where
none can be, without importing torch: floor/provenance/devices.py)."""

import time

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.contenders import registry
from minimodel.floor import contract
from minimodel.floor.provenance import devices, machine
from minimodel.floor.provenance.manifest import stage
from minimodel.gpu import device_slots, grids, shards_gather

with stage(snakemake) as st:
    started = time.monotonic()
    held = device_slots.claim(device_slots.MEASURING, progress=st.progress)  # before CUDA starts
    cfg = snakemake.params.cfg
    if machine.gpu_required(snakemake.params.require_cuda):
        machine.require_cuda()
    measured = devices.cuda_available()
    if measured:
        from minimodel.gpu import timing  # torch's: measured on the device

        result = timing.run(cfg, snakemake.params.random_seed, progress=st.progress,
                            contenders=registry.from_params(snakemake.params.contenders))
        rows, samples = result.pop("rows"), result.pop("samples")
        result.pop("lab01_prediction_from_cpu_ceilings")  # the gather's, from the CPU's ceilings
        st.extra.update(backend="cuda", device=result["device"])
    else:
        rows, samples = grids.no_gpu_timing_rows(cfg), []
        result = {"device": None, "status": contract.NO_GPU_TIMING}
        st.extra.update(backend="none", status=contract.NO_GPU_TIMING)
        print(f"gpu_timing_shard {snakemake.wildcards.shard}: no CUDA device; its {len(rows)} planned "
              "passes are listed as not run", file=st.progress)
    if held is not None:
        st.extra["gpu_slot"] = held.record()
    shards_gather.write_shard(snakemake.output.shard, {
        "selection": cfg["shard"], "passes": cfg["passes"], "result": result,
        "rows": rows, "order": shards_gather.timing_order(cfg, rows, measured),
        "samples": samples, "sample_order": shards_gather.timing_order(cfg, samples, measured),
        "gpu_slot": None if held is None else held.record(), "wall_s": round(time.monotonic() - started, 1)})
