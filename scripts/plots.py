"""Rule `plots`: every figure of `contract.FIGURES`, drawn from the result tables.

Each figure is drawn by the function of `minimodel.report.plots` (the forward's),
`minimodel.report.correctness_figure` (lab 02's correctness, both passes) or
`minimodel.report.backward_plots` (the backward's) that has its name; this script gives each
function the tables it reads. A figure whose GPU stage measured nothing (no GPU, no
ncu) is a figure that says why.
"""

import json

import matplotlib
import pandas as pd

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.floor import contract
from minimodel.floor.provenance.io import save_figure
from minimodel.floor.provenance.manifest import stage
from minimodel.report import backward_plots, correctness_figure, plots

# seaborn's figure-level grids are drawn through pyplot: off-screen, whatever display the machine has
matplotlib.use("Agg")

with stage(snakemake):
    inp, out = snakemake.input, snakemake.output
    ceilings = json.loads(open(inp.cpu_ceilings).read())
    timing = json.loads(open(inp.timing).read())
    timing_rows = pd.read_csv(inp.timing_table)
    bytes_summary = json.loads(open(inp.gpu_bytes_summary).read())
    symbolic_rows, cpu_rows, gpu_bytes_rows = (pd.read_csv(p) for p in (inp.symbolic, inp.cpu_bytes,
                                                                        inp.gpu_bytes))
    has_gpu = timing.get("device") is not None

    def timed(*args):
        """A GPU timing figure's arguments, or, without a GPU, why it has none."""
        return args if has_gpu else timing["status"]

    def profiled(*args):
        """A GPU bytes figure's arguments, or, without a measurement, why it has none."""
        return args if bytes_summary["measured"] else bytes_summary["status"]

    # each figure's arguments (a string: the reason it could not be drawn)
    arguments = {
        "bytes_vs_n": (cpu_rows, ceilings["device"]),
        "intensity_ratio": (symbolic_rows, snakemake.params.tile),
        "roofline": (ceilings, timing if has_gpu else None, timing_rows if has_gpu else None),
        "correctness": (pd.read_csv(inp.correctness), timing.get("device") or ceilings["device"]),
        "tflops_vs_n": timed(timing_rows, timing.get("device")),
        "ratio_to_backends": timed(timing_rows, timing.get("device")),
        "lab_speedup": timed(timing_rows, timing, timing.get("device")),
        "gpu_bytes": profiled(gpu_bytes_rows, bytes_summary.get("device")),
        # the model and the CPU's counts always; the GPU's DRAM reads where they were measured
        "backward_bytes_vs_n": (symbolic_rows, cpu_rows, snakemake.params.tile,
                                backward_plots.default_dtype(symbolic_rows, cpu_rows),
                                gpu_bytes_rows if bytes_summary["measured"] else None,
                                "" if bytes_summary["measured"] else bytes_summary["status"])
        if "direction" in symbolic_rows else "the symbolic table has no backward rows (a run made "
                                             "before the backward)",
        "backward_tflops_vs_n": timed(timing_rows, timing.get("device")),
    }
    if set(arguments) != set(contract.FIGURES):
        raise ValueError(f"scripts/plots.py draws {sorted(arguments)}, contract.FIGURES lists "
                         f"{sorted(contract.FIGURES)}: each figure needs its arguments here")
    for name in contract.FIGURES:
        args = arguments[name]
        [draw] = [getattr(m, name) for m in (plots, correctness_figure, backward_plots) if hasattr(m, name)]
        fig = plots.no_gpu_figure(name, args) if isinstance(args, str) else draw(*args)[0]
        save_figure(getattr(out, name), fig, dpi=110, bbox_inches="tight")
