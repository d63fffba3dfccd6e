"""The backward's figures, drawn from the result tables as `report.plots` draws the forward's:
each function returns (figure, the data frame it plotted).

`backward_bytes_vs_n`: the byte model of the backward against N (symbolic/bytes.csv's rows of
`direction` = backward: naive, and flash with each dQ accumulation), with the CPU's instrumented
counts (cpu/bytes.csv's backward rows) as points beside the lines of the model they measure, and,
where gpu/bytes/bytes.csv has measured backward rows, the GPU's DRAM reads beside the model's.

`backward_tflops_vs_n`: the backward alone's TFLOP/s (gpu/timing/timing.csv's rows of `direction`
= backward, FlashAttention's grid) against N for every implementation timed.
"""

from __future__ import annotations

import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from minimodel.floor import contract
from minimodel.report import plots

SOURCE_MODEL, SOURCE_CPU = "model", "CPU, instrumented"
SOURCE_GPU, SOURCE_GPU_MODEL = "GPU DRAM reads (ncu)", "model reads (the kernel's tile)"
REGIME_MARKERS = {"one head": "o", "many heads": "s"}


def _variants(rows: pd.DataFrame) -> list[str]:
    """The legend's name of each row: its scheme, and for the flash backward its dQ accumulation."""
    rows = contract.with_direction(rows)  # "" where the table has no dq_accumulation
    return [s if pd.isna(q) or q == "" else f"{s}, dQ {q}"
            for s, q in zip(rows["scheme"], rows["dq_accumulation"], strict=True)]


def default_dtype(symbolic_bytes: pd.DataFrame, cpu_bytes: pd.DataFrame | None) -> str:
    """The dtype the figure's model is drawn in: the CPU's backward measurements' (so the points lie
    on their lines), else the lab's where the symbolic table has it, else the table's first."""
    if cpu_bytes is not None and "direction" in cpu_bytes.columns:
        measured = cpu_bytes.loc[cpu_bytes["direction"] == contract.BACKWARD, "dtype"]
        if len(measured):
            return str(measured.iloc[0])
    dtypes = list(dict.fromkeys(symbolic_bytes["dtype"]))
    return contract.LAB_DTYPE if contract.LAB_DTYPE in dtypes else str(dtypes[0])


def _gpu_rows(gpu_bytes: pd.DataFrame | None) -> pd.DataFrame:
    """The GPU's measured backward points of naive and flash, not causal: DRAM reads and the
    model's reads per head."""
    columns = ["variant", "N", "d", "value", "source", "regime"]
    if gpu_bytes is None or "direction" not in gpu_bytes.columns:
        return pd.DataFrame(columns=columns)
    rows = gpu_bytes[(gpu_bytes["direction"] == contract.BACKWARD)
                     & (gpu_bytes["status"] == contract.MEASURED) & ~gpu_bytes["causal"].astype(bool)
                     & gpu_bytes["impl"].isin(plots.SCHEME_COLORS)]  # the model's schemes
    heads = rows["B"] * rows["H"]
    parts = [rows.assign(variant=rows["impl"], value=rows[column] / heads, source=source)[columns]
             for column, source in (("dram_read_bytes", SOURCE_GPU), ("model_read_bytes", SOURCE_GPU_MODEL))]
    return pd.concat(parts, ignore_index=True).dropna(subset=["value"])


def backward_bytes_vs_n(symbolic_bytes: pd.DataFrame, cpu_bytes: pd.DataFrame | None,
                        tile: tuple[int, int], dtype: str, gpu_bytes: pd.DataFrame | None = None,
                        gpu_status: str = ""):
    """Backward bytes per head against N, log-log, one panel per d: the model's lines at one tile
    and dtype, the CPU's measured points where cpu/bytes.csv has backward rows there; below, where
    `gpu_bytes` has measured backward rows, the DRAM reads per head of naive (autograd) and flash
    (the Triton backward) beside the model's reads at the kernel's tile (else `gpu_status` says why
    the figure has no GPU panels)."""
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
    model["source"] = SOURCE_MODEL
    model = model.rename(columns={"bytes": "value"})[["variant", "N", "d", "value", "source"]]
    measured = pd.DataFrame(columns=model.columns)
    if cpu_bytes is not None and "direction" in cpu_bytes.columns:
        rows = cpu_bytes[(cpu_bytes["direction"] == contract.BACKWARD) & (cpu_bytes["B_r"] == block_r)
                         & (cpu_bytes["B_c"] == block_c) & (cpu_bytes["dtype"] == dtype)].copy()
        rows["variant"] = _variants(rows)
        rows["source"] = SOURCE_CPU
        measured = rows.rename(columns={"bytes_instrumented": "value"})[list(model.columns)]
    gpu = _gpu_rows(gpu_bytes)
    data = pd.concat([f for f in (model, measured, gpu) if len(f)], ignore_index=True)
    order = sorted(model["variant"].unique())
    heads = sorted(model["d"].unique())
    fig = Figure(figsize=(6 * len(heads), 4.4 * (2 if len(gpu) else 1)))
    axes = fig.subplots(2 if len(gpu) else 1, len(heads), squeeze=False)
    for ax, d in zip(axes[0], heads, strict=True):
        sub = data[data["d"] == d]
        sns.lineplot(data=sub[sub["source"] == SOURCE_MODEL], x="N", y="value", hue="variant",
                     hue_order=order, ax=ax)
        points = sub[sub["source"] == SOURCE_CPU]
        if len(points):
            sns.scatterplot(data=points, x="N", y="value", hue="variant", hue_order=order, ax=ax,
                            legend=False, s=45)
        ax.set(xscale="log", yscale="log", xlabel="sequence length N (log)",
               ylabel="backward bytes per head (log)", title=f"d = {d}: model, CPU measured")
    axes[0][0].legend(title="line: model, dot: CPU measured", fontsize=8)
    if len(gpu):
        _gpu_panels(axes[1], gpu, heads)
    for row in axes:
        for ax in row[1:]:
            if ax.get_legend():
                ax.get_legend().remove()
    gpu_note = "" if len(gpu) else f"\nGPU DRAM bytes: {gpu_status or 'no measured backward rows'}"
    fig.suptitle(f"Backward bytes, naive vs flash ({dtype}, B_r = {block_r}, B_c = {block_c}; "
                 f"dQ, dK, dV writes left out){gpu_note}", fontsize=11)
    fig.tight_layout()
    return fig, data


def _gpu_panels(axes, gpu: pd.DataFrame, heads: list[int]) -> None:
    """Per d: each scheme's DRAM reads per head (dots, one marker per regime) and the model's (lines)."""
    palette = plots.SCHEME_COLORS
    for ax, d in zip(axes, heads, strict=True):
        sub = gpu[gpu["d"] == d]
        lines = sub[sub["source"] == SOURCE_GPU_MODEL]
        dots = sub[sub["source"] == SOURCE_GPU]
        if len(lines):
            sns.lineplot(data=lines, x="N", y="value", hue="variant", style="regime", palette=palette,
                         ax=ax, legend=False, dashes=True)
        if len(dots):
            sns.scatterplot(data=dots, x="N", y="value", hue="variant", style="regime", palette=palette,
                            markers=REGIME_MARKERS, ax=ax, s=45)
        ax.set(xscale="log", yscale="log", xlabel="sequence length N (log)",
               ylabel="backward DRAM reads per head (log)",
               title=f"d = {d}: GPU, measured (dots) and the model's reads (lines), fp16")


def backward_tflops_vs_n(rows: pd.DataFrame, device: str):
    """The backward alone's TFLOP/s against N on FlashAttention's grid, every implementation with
    backward rows timed; FLOPs 2.5 × the forward's 4·B·H·N²·d (halved when causal), as
    FlashAttention's benchmarks count them. A table with no backward timing says so."""
    backward = rows[rows["direction"] == contract.BACKWARD] if "direction" in rows.columns else rows.iloc[:0]
    data = backward[(backward["grid"] == plots.FA_GRID) & backward["ms"].notna()].copy()
    if data.empty:
        fig = plots.no_gpu_figure("Backward throughput", "gpu/timing/timing.csv has no timed backward "
                                  "rows on FlashAttention's grid: the backward was not timed on "
                                  f"{device or 'this machine'}.")
        return fig, data
    return plots.tflops_facets(data, "2.5 × 4·B·H·N²·d, ½ if causal",
                               f"Backward attention throughput (the gradient pass alone), fp16 — {device}")
