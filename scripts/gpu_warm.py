"""Rule `gpu_warm`: the timing stage's first calls made ahead, filling the machine's compile caches;
a table saying so without CUDA (where none can be, without importing torch:
floor/provenance/devices.py). An error outside a row stops the warm-up, not the run: its table
and summary say where and why (`warm.run`)."""

import pandas as pd

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.contenders import registry
from minimodel.floor import contract
from minimodel.floor.provenance import devices, machine
from minimodel.floor.provenance.io import write_csv, write_json
from minimodel.floor.provenance.manifest import stage
from minimodel.gpu import device_slots, grids

with stage(snakemake) as st:
    # on a host of several GPUs, one that no measuring job holds (minimodel.gpu.device_slots)
    held = device_slots.claim(device_slots.WARM, progress=st.progress)
    if held is not None:
        st.extra["gpu_slot"] = held.record()
    cfg = snakemake.params.cfg
    if machine.gpu_required(snakemake.params.require_cuda):
        machine.require_cuda()
    if devices.cuda_available():
        import torch  # measured on the device: torch's, and the warm-up's

        from minimodel.gpu import warm

        result = warm.run(cfg, snakemake.params.random_seed, progress=st.progress,
                          contenders=registry.from_params(snakemake.params.contenders))
        rows = result.pop("rows")
        result["device"] = torch.cuda.get_device_name(0)
        st.extra.update(backend="cuda", device=result["device"])
        if "stopped" in result:
            st.extra.update(stopped=result["stopped"])
    else:
        rows = grids.no_gpu_warm_rows(cfg)
        result = {"device": None, "status": contract.NO_GPU_WARM}
        st.extra.update(backend="none", status=contract.NO_GPU_WARM)
    write_csv(snakemake.output.table, pd.DataFrame(rows, columns=grids.WARM_COLUMNS))
    write_json(snakemake.output.summary, result)
