"""The backward's figures, drawn from the result tables as `report.plots` draws the forward's:
each function returns (figure, the data frame it plotted).

`backward_bytes_vs_n`: the byte model of the backward against N (symbolic/bytes.csv's rows of
`direction` = backward: naive, and flash with each dQ accumulation), with the CPU's instrumented
counts (cpu/bytes.csv's backward rows) as points beside the lines of the model they measure.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from minimodel import contract


def _variants(rows: pd.DataFrame) -> list[str]:
    """The legend's name of each row: its scheme, and for the flash backward its dQ accumulation."""
    return [s if pd.isna(q) or q == "" else f"{s}, dQ {q}"
            for s, q in zip(rows["scheme"], rows["dq_accumulation"], strict=True)]


def backward_bytes_vs_n(symbolic_bytes: pd.DataFrame, cpu_bytes: pd.DataFrame | None,
                        tile: tuple[int, int], dtype: str):
    """Backward bytes per head against N, log-log, one panel per d: the model's lines at one tile
    and dtype, the CPU's measured points where cpu/bytes.csv has backward rows there."""
    block_r, block_c = tile
    if "direction" not in symbolic_bytes.columns:
        raise ValueError("the symbolic table has no direction column: a run made before the backward")
    model = symbolic_bytes[(symbolic_bytes["direction"] == contract.BACKWARD)
                           & (symbolic_bytes["B_r"] == block_r) & (symbolic_bytes["B_c"] == block_c)
                           & (symbolic_bytes["dtype"] == dtype)].copy()
    if model.empty:
        raise ValueError(f"the symbolic table has no backward rows at B_r = {block_r}, B_c = {block_c}, "
                         f"{dtype}")
    model["variant"] = _variants(model)
    model["source"] = "model"
    model = model.rename(columns={"bytes": "value"})[["variant", "N", "d", "value", "source"]]
    measured = pd.DataFrame(columns=model.columns)
    if cpu_bytes is not None and "direction" in cpu_bytes.columns:
        rows = cpu_bytes[(cpu_bytes["direction"] == contract.BACKWARD) & (cpu_bytes["B_r"] == block_r)
                         & (cpu_bytes["B_c"] == block_c) & (cpu_bytes["dtype"] == dtype)].copy()
        rows["variant"] = _variants(rows)
        rows["source"] = "CPU, instrumented"
        measured = rows.rename(columns={"bytes_instrumented": "value"})[list(model.columns)]
    data = pd.concat([model, measured], ignore_index=True) if len(measured) else model.reset_index(drop=True)
    order = sorted(model["variant"].unique())
    heads = sorted(model["d"].unique())
    fig, axes = plt.subplots(1, len(heads), figsize=(6 * len(heads), 4.4), squeeze=False)
    for ax, d in zip(axes[0], heads, strict=True):
        sub = data[data["d"] == d]
        sns.lineplot(data=sub[sub["source"] == "model"], x="N", y="value", hue="variant", hue_order=order,
                     ax=ax)
        points = sub[sub["source"] != "model"]
        if len(points):
            sns.scatterplot(data=points, x="N", y="value", hue="variant", hue_order=order, ax=ax,
                            legend=False, s=45)
        ax.set(xscale="log", yscale="log", xlabel="sequence length N (log)",
               ylabel="backward bytes per head (log)", title=f"d = {d}")
    axes[0][0].legend(title="line: model, dot: measured", fontsize=8)
    for ax in axes[0][1:]:
        if ax.get_legend():
            ax.get_legend().remove()
    fig.suptitle(f"Backward bytes, naive vs flash ({dtype}, B_r = {block_r}, B_c = {block_c}; "
                 "dQ, dK, dV writes left out)", fontsize=11)
    fig.tight_layout()
    return fig, data
