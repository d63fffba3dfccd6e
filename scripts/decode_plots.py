"""Rule `decode_plots`: decode's figures (contract.DECODE_FIGURES) from its stage 1 and stage 3 tables."""

import json

import matplotlib
import pandas as pd

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.floor import contract
from minimodel.floor.provenance.io import save_figure
from minimodel.floor.provenance.manifest import stage
from minimodel.report import decode_plots

matplotlib.use("Agg")

with stage(snakemake):
    inp, out = snakemake.input, snakemake.output
    summary = json.loads(open(inp.gpu_summary).read())
    arguments = {"decode_bytes": (pd.read_csv(inp.symbolic), snakemake.params.bandwidth),
                 "decode_bandwidth": (pd.read_csv(inp.gpu), summary)}
    if set(arguments) != set(contract.DECODE_FIGURES):
        raise ValueError(f"scripts/decode_plots.py draws {sorted(arguments)}, contract.DECODE_FIGURES lists "
                         f"{sorted(contract.DECODE_FIGURES)}: each figure needs its arguments here")
    for name in contract.DECODE_FIGURES:
        fig, _ = getattr(decode_plots, name)(*arguments[name])
        save_figure(getattr(out, name), fig, dpi=110, bbox_inches="tight")
