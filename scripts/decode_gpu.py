"""Rule `decode_gpu`: decode checked against float64 and timed beside the contenders on the GPU; without
one, the kernel checked under Triton's interpreter and every timed row saying why not."""

import json

import pandas as pd
import torch

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.floor import contract
from minimodel.floor.provenance import machine
from minimodel.floor.provenance.io import write_csv, write_json
from minimodel.floor.provenance.manifest import stage
from minimodel.gpu import decode, device_slots

with stage(snakemake) as st:
    # a GPU of its own on a host with several (--resources gpu=K gpu_measure=K), before CUDA starts
    held = device_slots.claim(device_slots.MEASURING, progress=st.progress)
    cfg, cap, seed = snakemake.params.cfg, snakemake.params.max_cache_bytes, snakemake.params.random_seed
    if machine.gpu_required(snakemake.params.require_cuda):
        machine.require_cuda()
    if torch.cuda.is_available():
        bandwidth = json.loads(open(snakemake.input.timing).read())["ceilings"]["bandwidth_bytes_per_s"]
        rows, samples, summary = decode.run(cfg, cap, bandwidth, snakemake.params.timing, seed,
                                            progress=st.progress)
        st.extra.update(backend="cuda", device=summary["device"])
    else:
        rows = decode.interpreter_rows(cfg, cap, seed) + decode.no_gpu_rows(cfg, cap)
        samples = []
        summary = {"device": None, "status": contract.NO_GPU_TIMING,
                   "kernel_passed": decode.kernel_passed(rows)}
        st.extra.update(backend="interpreter", status=contract.NO_GPU_TIMING)
        print("decode_gpu: no CUDA device; the kernel checked under the interpreter, "
              f"{snakemake.output.table} lists the timed points as not run", file=st.progress)
    if held is not None:
        st.extra["gpu_slot"] = held.record()
    summary["random_seed"] = seed
    write_csv(snakemake.output.table, pd.DataFrame(rows))
    write_csv(snakemake.output.samples, pd.DataFrame(samples, columns=[*decode.SAMPLE_COLUMNS]))
    write_json(snakemake.output.summary, summary)
    if not summary["kernel_passed"]:
        raise SystemExit(f"decode_gpu: the kernel failed its check; every case is in "
                         f"{snakemake.output.table}")
