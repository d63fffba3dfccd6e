"""The figures of lab 01 (D, E) and lab 02 (F) (notes/labs.md), drawn with seaborn from the result tables
(lab 02's correctness figure: `correctness_figure`; the backward's: `backward_plots`).

Every figure is drawn from the tables the workflow wrote, never from numbers typed here; each
function returns (figure, the data frame it plotted), so tests can check that the plotted series
are the tables' rows. Without GPU timing, the GPU figures say so instead of failing.

The figures drawn here are `matplotlib.figure.Figure` objects, which need no backend; seaborn's
figure-level grids (relplot, catplot) make theirs through pyplot, so the process that saves them
picks pyplot's backend (`scripts/plots.py`: Agg).
"""

from __future__ import annotations

import matplotlib.ticker
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from minimodel.floor import contract

sns.set_theme(style="whitegrid", context="notebook")

SCHEME_COLORS = {contract.NAIVE_SCHEME: "tab:orange", contract.FLASH_SCHEME: "tab:blue"}
IMPL_LABELS = {
    contract.TRITON: "this kernel (Triton)",
    contract.SDPA_CUDNN: "SDPA cuDNN",
    contract.SDPA_FLASH: "SDPA flash (FA2)",
    contract.SDPA_EFFICIENT: "SDPA memory-efficient",
    contract.NAIVE: "naive PyTorch",
    contract.TRITON_TL: "this kernel, tl path",
    contract.FLEX: "FlexAttention",
    contract.FLASH_ATTN: "FlashAttention-2 (flash_attn)",
    contract.FA4: "FlashAttention-4 (flash_attn.cute)",
}
LAB_GRID, FA_GRID = contract.LAB_GRID, contract.FLASHATTENTION_GRID


def _message_figure(title: str, message: str):
    fig = Figure(figsize=(7, 3))
    ax = fig.subplots()
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True, fontsize=12)
    ax.set_title(title)
    return fig


LONG_N = 1024  # lab 01: from here on flash should be much better than naive


def scheme_labels(data: pd.DataFrame) -> dict[str, str]:
    """Legend names of the schemes, the flash tile read from the table (B_r, B_c columns)."""
    tiles = sorted({(int(r), int(c)) for r, c in zip(data["B_r"], data["B_c"], strict=True)})
    tile = ", ".join(f"B_r = {r}, B_c = {c}" for r, c in tiles)
    return {contract.NAIVE_SCHEME: contract.NAIVE_SCHEME, contract.FLASH_SCHEME: f"flash ({tile})"}


def bytes_vs_n(cpu_bytes: pd.DataFrame, machine: str):
    """Model bytes as lines, instrumented CPU measurements as points, log-log; d and dtype as facets."""
    data = contract.forward_rows(cpu_bytes).copy()
    labels = scheme_labels(data)
    data["scheme_label"] = data["scheme"].map(labels)
    g = sns.relplot(data=data, x="N", y="bytes_model", hue="scheme_label", col="d", row="dtype",
                    kind="line", height=3.4, aspect=1.25, facet_kws={"sharey": False},
                    hue_order=list(labels.values()))
    for (dtype, d), ax in g.axes_dict.items():
        sub = data[(data["dtype"] == dtype) & (data["d"] == d)]
        sns.scatterplot(data=sub, x="N", y="bytes_instrumented", hue="scheme_label", ax=ax,
                        hue_order=list(labels.values()), legend=False, s=45, marker="o")
        ax.set(xscale="log", yscale="log")
        if sub["N"].max() >= LONG_N:  # the lab's long sequences, where the grid reaches them
            ax.axvspan(LONG_N, sub["N"].max() * 1.05, color="tab:green", alpha=0.08)
            ax.text(LONG_N * 1.07, 0.04, f"N ≥ {LONG_N}", fontsize=8, color="tab:green",
                    transform=ax.get_xaxis_transform())
        pivot = sub.pivot_table(index="N", columns="scheme", values="bytes_model")
        ratio = pivot[contract.NAIVE_SCHEME] / pivot[contract.FLASH_SCHEME]
        n_big = ratio.index[-1]
        ax.annotate(f"N={n_big}: naive/flash = {ratio.iloc[-1]:.2f}×",
                    xy=(n_big, pivot[contract.FLASH_SCHEME].iloc[-1]),
                    xytext=(0.04, 0.9), textcoords="axes fraction", fontsize=8,
                    arrowprops={"arrowstyle": "->", "color": "gray"})
    g.set_axis_labels("sequence length N (log)", "bytes per head (log)")
    g.set_titles("{row_name}, d = {col_name}")
    g.legend.set_title("line: model, dot: measured")
    g.figure.suptitle(f"Bytes moved, naive vs flash (O write left out of both) — measured on {machine}",
                      y=1.03, fontsize=11)
    return g.figure, data


def intensity_ratio(symbolic_bytes: pd.DataFrame, tile: tuple[int, int]):
    """flash/naive intensity ratio (= naive/flash bytes, the FLOPs being equal) vs N at one tile."""
    block_r, block_c = tile
    symbolic_bytes = contract.forward_rows(symbolic_bytes)
    data = symbolic_bytes[(symbolic_bytes["convention"] == contract.CONSISTENT_CONVENTION)
                          & (symbolic_bytes["B_r"] == block_r) & (symbolic_bytes["B_c"] == block_c)]
    if data.empty:
        tiles = sorted(set(zip(symbolic_bytes["B_r"], symbolic_bytes["B_c"], strict=True)))
        raise ValueError(f"the symbolic table has no tile B_r = {block_r}, B_c = {block_c}; "
                         f"its tiles: {tiles}")
    naive = data[data["scheme"].isin([contract.NAIVE_SCHEME, contract.NAIVE_FP32_SOFTMAX_SCHEME])]
    flash = data[data["scheme"] == contract.FLASH_SCHEME][["N", "d", "dtype", "intensity"]]
    ratio = naive.merge(flash, on=["N", "d", "dtype"], suffixes=("", "_flash"))
    ratio["ratio"] = ratio["intensity_flash"] / ratio["intensity"]
    # with every tensor in one dtype the ratio does not depend on which: one line for all of them
    ratio["naive accounting"] = ratio["scheme"].map(
        {contract.NAIVE_SCHEME: "every tensor in one dtype (any)",
         contract.NAIVE_FP32_SOFTMAX_SCHEME: "softmax in fp32, fp16 in and out"})
    ratio["head dim"] = "d = " + ratio["d"].astype(str)
    ratio = ratio.drop_duplicates(["naive accounting", "N", "d"]).reset_index(drop=True)
    fig = Figure(figsize=(8, 4.5))
    ax = fig.subplots()
    sns.lineplot(data=ratio, x="N", y="ratio", hue="naive accounting", style="head dim", markers=True,
                 ax=ax)
    ax.set(xscale="log", xlabel="sequence length N (log)",
           ylabel="flash intensity / naive intensity (×)",
           title=f"Model intensity ratio, B_r = {block_r}, B_c = {block_c} (O write left out of both)")
    ax.axhline(1, color="gray", lw=0.8, ls="--")
    ax.legend(fontsize=8, bbox_to_anchor=(1.02, 1), loc="upper left")
    return fig, ratio


def roofline(cpu_ceilings: dict, gpu_timing: dict | None, gpu_rows: pd.DataFrame | None):
    """Measured ceilings, and naive and flash placed by model intensity and achieved FLOP/s."""
    cpu = cpu_ceilings.get("device", "this machine").removeprefix("cpu: ")
    panels = [("CPU: " + cpu, cpu_ceilings["peak_flops_per_s"], cpu_ceilings["bandwidth_bytes_per_s"],
               _cpu_points(cpu_ceilings))]
    if gpu_timing and gpu_timing.get("ceilings") and gpu_rows is not None:
        c = gpu_timing["ceilings"]
        panels.append((f"GPU: {gpu_timing['device']} (fp16)", c["peak_flops_per_s"],
                       c["bandwidth_bytes_per_s"], _gpu_points(gpu_timing, gpu_rows)))
    fig = Figure(figsize=(6.5 * len(panels), 4.6))
    axes = fig.subplots(1, len(panels), squeeze=False)
    points_all = []
    for ax, (title, peak, bw, points) in zip(axes[0], panels, strict=True):
        x = np.logspace(-1, 4, 200)
        ax.plot(x, np.minimum(peak, x * bw), color="black", lw=1.5,
                label=f"roofline: {peak / 1e12:.3g} TFLOP/s, {bw / 1e9:.0f} GB/s")
        palette = {label: SCHEME_COLORS[scheme] for label, scheme in zip(points["label"], points["scheme"],
                                                                          strict=True)}
        sns.scatterplot(data=points, x="intensity", y="achieved_flops_per_s", hue="label", s=80, ax=ax,
                        palette=palette)
        ax.set(xscale="log", yscale="log", xlabel="model intensity (FLOP per slow-memory byte, log)",
               ylabel="achieved FLOP/s (log)", title=title)
        ax.legend(fontsize=8)
        points_all.append(points.assign(panel=title))
    return fig, pd.concat(points_all, ignore_index=True)


def _cpu_points(c: dict) -> pd.DataFrame:
    refs = c.get("references", {})
    p = c["prediction"]
    rows = [{"label": f"{s} reference, N={p['N']}, d={p['d']}, fp32", "scheme": s,
             "intensity": refs[s]["intensity"], "achieved_flops_per_s": refs[s]["achieved_flops_per_s"]}
            for s in (contract.NAIVE_SCHEME, contract.FLASH_SCHEME) if s in refs]
    return pd.DataFrame(rows)


def _gpu_points(t: dict, rows: pd.DataFrame) -> pd.DataFrame:
    pred = {p["N"]: p for p in t["lab_grid_predictions_from_gpu_ceilings"]}
    rows = contract.forward_rows(rows)  # the forward's timings: the roofline places the forward
    lab = rows[(rows["grid"] == LAB_GRID) & (~rows["causal"])
               & rows["impl"].isin([contract.NAIVE, contract.TRITON]) & rows["ms"].notna()]
    n = lab["N"].max()
    out = []
    for _, r in lab[lab["N"] == n].iterrows():
        scheme = contract.NAIVE_SCHEME if r["impl"] == contract.NAIVE else contract.FLASH_SCHEME
        out.append({"label": f"{IMPL_LABELS[r['impl']]}, lab grid N={n}", "scheme": scheme,
                    "intensity": pred[n][f"intensity_{scheme}"],
                    "achieved_flops_per_s": r["tflops"] * 1e12})
    return pd.DataFrame(out)


def _label(impl: str) -> str:
    """The legend's name of an implementation; a contender is shown by its config name."""
    return IMPL_LABELS.get(impl, impl)


def _order(impls: pd.Series) -> list[str]:
    """Legend order: the built-in implementations as IMPL_LABELS lists them, then contenders."""
    present = set(impls)
    return ([IMPL_LABELS[k] for k in IMPL_LABELS if k in present]
            + sorted(present - set(IMPL_LABELS)))


def tflops_vs_n(rows: pd.DataFrame, device: str):
    rows = contract.forward_rows(rows)  # the backward's: backward_plots.backward_tflops_vs_n
    data = rows[(rows["grid"] == FA_GRID) & rows["ms"].notna()].copy()
    return tflops_facets(data, "4·B·H·N²·d, ½ if causal", f"Forward attention throughput, fp16 — {device}")


def tflops_facets(data: pd.DataFrame, flops: str, title: str):
    """TFLOP/s against N of FlashAttention's grid's timed rows, a panel per head dim and mask, a
    line per implementation; `flops`: how the FLOPs were counted."""
    data["implementation"] = data["impl"].map(_label)
    data["mask"] = np.where(data["causal"].astype(bool), "causal", "not causal")
    g = sns.relplot(data=data, x="N", y="tflops", hue="implementation", style="implementation",
                    col="mask", row="d", kind="line", markers=True, height=3.3, aspect=1.3,
                    hue_order=_order(data["impl"]))
    for ax in g.axes.flat:
        ax.set_xscale("log", base=2)
    tokens = sorted(set(data["B"] * data["N"]))
    g.set_axis_labels(f"sequence length N (batch·N = {', '.join(map(str, tokens))})", f"TFLOP/s ({flops})")
    g.set_titles("d = {row_name}, {col_name}")
    g.figure.suptitle(title, y=1.02)
    return g.figure, data


def ratio_to_backends(rows: pd.DataFrame, device: str):
    rows = contract.forward_rows(rows)
    data = rows[(rows["grid"] == FA_GRID) & ~rows["impl"].isin([contract.TRITON, contract.NAIVE])
                & rows["triton_speedup_over_this"].notna()].copy()
    data["backend"] = data["impl"].map(_label)
    data["point"] = data["N"].astype(str) + (np.where(data["causal"], " causal", ""))
    g = sns.catplot(data=data, x="point", y="triton_speedup_over_this", hue="backend", col="d",
                    kind="bar", height=3.8, aspect=1.5, hue_order=_order(data["impl"]))
    for ax in g.axes.flat:
        ax.axhline(1.0, color="black", lw=1)
        ax.tick_params(axis="x", rotation=60)
    g.set_axis_labels("N (and mask)", "kernel speed / backend speed")
    g.figure.suptitle(f"This kernel against each SDPA backend and contender (>1: the kernel is faster) — "
                      f"{device}", y=1.03)
    return g.figure, data


def lab_speedup(rows: pd.DataFrame, timing: dict, device: str):
    rows = contract.forward_rows(rows)
    data = rows[(rows["grid"] == LAB_GRID) & (rows["impl"] == contract.NAIVE)
                & rows["triton_speedup_over_this"].notna()].copy()
    data["mask"] = np.where(data["causal"], "causal", "not causal")
    pred = pd.DataFrame(timing["lab_grid_predictions_from_gpu_ceilings"])
    fig = Figure(figsize=(7, 4.3))
    ax = fig.subplots()
    sns.lineplot(data=data, x="N", y="triton_speedup_over_this", hue="mask", marker="o", ax=ax)
    ax.plot(pred["N"], pred["predicted_speedup"], color="gray", ls="--", marker="x",
            label="roofline prediction from bytes (not causal)")
    shape = data.iloc[0] if len(data) else {"B": "?", "H": "?", "d": "?"}
    ax.set(xscale="log", yscale="log", xlabel=f"sequence length N (B={shape['B']}, H={shape['H']}, "
           f"d={shape['d']})", ylabel="speedup over naive PyTorch (×)",
           title=f"Lab grid: kernel vs naive attention, fp16 — {device}")
    ns = sorted(set(data["N"]))
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda y, _: f"{y:g}×"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.FuncFormatter(lambda y, _: f"{y:g}×"))
    ax.legend(fontsize=8)
    return fig, data


def no_gpu_figure(title: str, reason: str):
    return _message_figure(title, reason + "\nSee results/reference/nvidia-h200/ for the committed H200 run.")


def gpu_bytes(table: pd.DataFrame, device: str):
    """DRAM bytes read per head (Nsight Compute) against the model's reads, not causal.

    One panel per head count (one head; many heads, past the L2) and head dim. The flash model
    uses the tile the kernel ran (the table's model_B_r). The floor: Q, K and V read once.
    Contenders are measured lines of their own, with no model.
    """
    table = contract.forward_rows(table)  # the backward's: backward_plots.backward_bytes_vs_n
    rows = table[(table["status"] == contract.MEASURED) & ~table["causal"].astype(bool)].copy()
    heads = rows["B"] * rows["H"]
    rows["dram_per_head"] = rows["dram_read_bytes"] / heads
    rows["model"] = rows["model_read_bytes"] / heads
    rows["inputs"] = 3 * rows["compulsory_bytes"] / 4 / heads  # compulsory: Q, K, V and O
    long = []
    for column, kind in (("dram_per_head", "measured (DRAM)"), ("model", "model")):
        part = rows[["regime", "d", "N", "impl", column]].rename(columns={column: "bytes_per_head"})
        long.append(part.assign(kind=kind, series=part["impl"]))
    floor = rows[rows["impl"] == contract.FLASH_SCHEME][["regime", "d", "N", "inputs"]]
    long.append(floor.rename(columns={"inputs": "bytes_per_head"})
                .assign(kind="Q, K, V once", series="Q, K, V once", impl="Q, K, V once"))
    data = pd.concat(long, ignore_index=True)
    data = data.dropna(subset=["bytes_per_head"])  # a contender has no model: its tiles are its own
    contenders = [i for i in dict.fromkeys(rows["impl"]) if i not in SCHEME_COLORS]
    spare = [c for c in sns.color_palette("tab10").as_hex() if c not in ("#1f77b4", "#ff7f0e", "#7f7f7f")]
    palette = {**SCHEME_COLORS, **dict(zip(contenders, spare * 2, strict=False)), "Q, K, V once": "tab:gray"}
    g = sns.relplot(data=data, x="N", y="bytes_per_head", hue="series", style="kind", col="regime",
                    row="d", kind="line", markers={"measured (DRAM)": "o", "model": "X", "Q, K, V once": "s"},
                    dashes={"measured (DRAM)": "", "model": (4, 2), "Q, K, V once": (1, 2)},
                    palette=palette, height=3.2, aspect=1.3,
                    hue_order=[contract.NAIVE_SCHEME, contract.FLASH_SCHEME, *contenders, "Q, K, V once"],
                    style_order=["measured (DRAM)", "model", "Q, K, V once"], facet_kws={"sharey": False})
    for ax in g.axes.flat:
        ax.set(xscale="log", yscale="log")
    g.set_axis_labels("sequence length N (log)", "bytes read per head (log)")
    g.set_titles("d = {row_name}, {col_name}")
    g.legend.set_title("")
    g.figure.suptitle(f"Bytes read from DRAM, measured with Nsight Compute on {device}, against the "
                      "model (not causal)", y=1.03, fontsize=11)
    return g.figure, data
