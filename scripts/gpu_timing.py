"""Rule `gpu_timing`: kernel vs naive vs SDPA backends on the GPU; an honest no-GPU table without one."""

import json

import pandas as pd
import torch

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.contenders import registry
from minimodel.floor import contract
from minimodel.floor.provenance import machine
from minimodel.floor.provenance.io import write_csv, write_json
from minimodel.floor.provenance.manifest import stage
from minimodel.gpu import timing

with stage(snakemake) as st:
    cfg = snakemake.params.cfg
    if machine.gpu_required(snakemake.params.require_cuda):
        machine.require_cuda()
    cpu_prediction = json.loads(open(snakemake.input.cpu_ceilings).read())["prediction"]
    if torch.cuda.is_available():
        result = timing.run(cfg, snakemake.params.random_seed, cpu_prediction, progress=st.progress,
                            contenders=registry.from_params(snakemake.params.contenders))
        result["random_seed"] = snakemake.params.random_seed
        rows = result.pop("rows")
        samples = result.pop("samples")
        st.extra.update(backend="cuda", device=result["device"])
    else:
        rows, samples = timing.no_gpu_rows(cfg), []
        result = {"device": None, "status": contract.NO_GPU_TIMING,
                  "lab01_prediction_from_cpu_ceilings": cpu_prediction}
        st.extra.update(backend="none", status=contract.NO_GPU_TIMING)
        # said on the console where it happens, not only in the log and the compare summary at the end
        print(f"gpu_timing: no CUDA device; {snakemake.output.table} lists the {len(rows)} planned "
              "points as not run", file=st.progress)
    write_csv(snakemake.output.table, pd.DataFrame(rows))
    write_csv(snakemake.output.samples, pd.DataFrame(samples, columns=contract.TIMING_SAMPLES_COLUMNS))
    write_json(snakemake.output.summary, result)
