"""Rule `plots`: every figure of the labs, drawn from the result tables."""

import json

import pandas as pd

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.provenance.io import save_figure
from minimodel.provenance.manifest import stage
from minimodel.report import plots

with stage(snakemake):
    inp, out = snakemake.input, snakemake.output
    ceilings = json.loads(open(inp.cpu_ceilings).read())
    timing = json.loads(open(inp.timing).read())
    timing_rows = pd.read_csv(inp.timing_table)
    has_gpu = timing.get("device") is not None
    figures = {
        "bytes_vs_n": plots.bytes_vs_n(pd.read_csv(inp.cpu_bytes), ceilings["device"])[0],
        "intensity_ratio": plots.intensity_ratio(pd.read_csv(inp.symbolic), snakemake.params.tile)[0],
        "roofline": plots.roofline(ceilings, timing if has_gpu else None,
                                   timing_rows if has_gpu else None)[0],
        "correctness": plots.correctness(pd.read_csv(inp.correctness),
                                         timing.get("device") or ceilings["device"])[0],
    }
    gpu_figures = {
        "tflops_vs_n": lambda: plots.tflops_vs_n(timing_rows, timing["device"]),
        "ratio_to_backends": lambda: plots.ratio_to_backends(timing_rows, timing["device"]),
        "lab_speedup": lambda: plots.lab_speedup(timing_rows, timing, timing["device"]),
    }
    for name, draw in gpu_figures.items():
        figures[name] = draw()[0] if has_gpu else plots.no_gpu_figure(name, timing["status"])
    bytes_summary = json.loads(open(inp.gpu_bytes_summary).read())
    if bytes_summary["measured"]:
        figures["gpu_bytes"] = plots.gpu_bytes(pd.read_csv(inp.gpu_bytes), bytes_summary["device"])[0]
    else:
        figures["gpu_bytes"] = plots.no_gpu_figure("gpu_bytes", bytes_summary["status"])
    for name, fig in figures.items():
        save_figure(getattr(out, name), fig, dpi=110, bbox_inches="tight")
