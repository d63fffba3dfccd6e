"""Rule `cpu_roofline`: this machine's ceilings and lab 01's roofline speedup prediction."""

import logging

import torch

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.cpu import roofline
from minimodel.floor import roofline_model
from minimodel.floor.provenance import project
from minimodel.floor.provenance.io import write_json
from minimodel.floor.provenance.machine import cpu_description
from minimodel.floor.provenance.manifest import stage

with stage(snakemake):
    cfg = snakemake.params.cfg
    project.check_memory(roofline.memory_needed(cfg["matmul_n"], cfg["copy_mib"], cfg["predict_at"][0]))
    torch.set_num_threads(snakemake.threads)
    torch.manual_seed(snakemake.params.random_seed)
    ceilings = roofline.measure_ceilings(cfg["matmul_n"], cfg["copy_mib"], cfg["repeats"])
    n, d = cfg["predict_at"]
    ceilings["prediction"] = roofline_model.predict_speedup(ceilings, n, d, *snakemake.params.tile)
    # the references themselves on this CPU: the Python tile loop is far from its roofline
    ceilings["references"] = roofline.time_references(n, d, *snakemake.params.tile)
    ceilings["device"] = cpu_description()  # the CPU, also on a machine with a GPU
    logging.info("peak %.3g FLOP/s, bandwidth %.3g B/s, predicted speedup %.2f",
                 ceilings["peak_flops_per_s"], ceilings["bandwidth_bytes_per_s"],
                 ceilings["prediction"]["predicted_speedup"])
    write_json(snakemake.output.ceilings, ceilings)
