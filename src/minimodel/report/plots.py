"""The figures of lab 01 (D, E) and lab 02 (F) (notes/labs.md), drawn with seaborn from the result tables.

Every figure is drawn from the tables the workflow wrote, never from numbers typed here; each
function returns (figure, the data frame it plotted), so tests can check that the plotted series
are the tables' rows. Without GPU timing, the GPU figures say so instead of failing.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from minimodel import contract  # noqa: E402

sns.set_theme(style="whitegrid", context="notebook")

SCHEME_COLORS = {"naive": "tab:orange", "flash": "tab:blue"}
IMPL_LABELS = {
    contract.TRITON: "this kernel (Triton)",
    contract.SDPA_CUDNN: "SDPA cuDNN",
    contract.SDPA_FLASH: "SDPA flash (FA2)",
    contract.SDPA_EFFICIENT: "SDPA memory-efficient",
    contract.NAIVE: "naive PyTorch",
    contract.TRITON_TL: "this kernel, tl path",
    contract.FLEX: "FlexAttention",
    contract.FLASH_ATTN: "flash_attn package",
}
LAB_GRID, FA_GRID = contract.LAB_GRID, contract.FLASHATTENTION_GRID


def _message_figure(title: str, message: str):
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True, fontsize=12)
    ax.set_title(title)
    return fig


LONG_N = 1024  # lab 01: from here on flash should be much better than naive


def scheme_labels(data: pd.DataFrame) -> dict[str, str]:
    """Legend names of the schemes, the flash tile read from the table (B_r, B_c columns)."""
    tiles = sorted({(int(r), int(c)) for r, c in zip(data["B_r"], data["B_c"], strict=True)})
    tile = ", ".join(f"B_r = {r}, B_c = {c}" for r, c in tiles)
    return {"naive": "naive", "flash": f"flash ({tile})"}


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
        ratio = pivot["naive"] / pivot["flash"]
        n_big = ratio.index[-1]
        ax.annotate(f"N={n_big}: naive/flash = {ratio.iloc[-1]:.2f}×", xy=(n_big, pivot["flash"].iloc[-1]),
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
    naive = data[data["scheme"].isin(["naive", "naive_fp32_softmax"])]
    flash = data[data["scheme"] == "flash"][["N", "d", "dtype", "intensity"]]
    ratio = naive.merge(flash, on=["N", "d", "dtype"], suffixes=("", "_flash"))
    ratio["ratio"] = ratio["intensity_flash"] / ratio["intensity"]
    # with every tensor in one dtype the ratio does not depend on which: one line for all of them
    ratio["naive accounting"] = ratio["scheme"].map(
        {"naive": "every tensor in one dtype (any)",
         "naive_fp32_softmax": "softmax in fp32, fp16 in and out"})
    ratio["head dim"] = "d = " + ratio["d"].astype(str)
    ratio = ratio.drop_duplicates(["naive accounting", "N", "d"]).reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(8, 4.5))
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
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.6), squeeze=False)
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
            for s in ("naive", "flash") if s in refs]
    return pd.DataFrame(rows)


def _gpu_points(t: dict, rows: pd.DataFrame) -> pd.DataFrame:
    pred = {p["N"]: p for p in t["lab_grid_predictions_from_gpu_ceilings"]}
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
    data = rows[(rows["grid"] == FA_GRID) & rows["ms"].notna()].copy()
    data["implementation"] = data["impl"].map(_label)
    data["mask"] = np.where(data["causal"], "causal", "not causal")
    g = sns.relplot(data=data, x="N", y="tflops", hue="implementation", style="implementation",
                    col="mask", row="d", kind="line", markers=True, height=3.3, aspect=1.3,
                    hue_order=_order(data["impl"]))
    for ax in g.axes.flat:
        ax.set_xscale("log", base=2)
    tokens = sorted(set(data["B"] * data["N"]))
    g.set_axis_labels(f"sequence length N (batch·N = {', '.join(map(str, tokens))})",
                      "TFLOP/s (4·B·H·N²·d, ½ if causal)")
    g.set_titles("d = {row_name}, {col_name}")
    g.figure.suptitle(f"Forward attention throughput, fp16 — {device}", y=1.02)
    return g.figure, data


def ratio_to_backends(rows: pd.DataFrame, device: str):
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
    data = rows[(rows["grid"] == LAB_GRID) & (rows["impl"] == contract.NAIVE)
                & rows["triton_speedup_over_this"].notna()].copy()
    data["mask"] = np.where(data["causal"], "causal", "not causal")
    pred = pd.DataFrame(timing["lab_grid_predictions_from_gpu_ceilings"])
    fig, ax = plt.subplots(figsize=(7, 4.3))
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


ERROR_FLOOR = 1e-7  # an exact result (N = 1) is drawn here on the log axis


def correctness(rows: pd.DataFrame, machine: str):
    """The kernel's error per case against the pass line; each contender's error beside it."""
    every = rows[~rows["skipped"].astype(bool)].copy()
    dtype = every["dtype"].map({"float16": "fp16", "bfloat16": "bf16"}).fillna(every["dtype"])
    every["case"] = (dtype + " d=" + every["d"].astype(str) + " N=" + every["N"].astype(str)
                     + np.where(every["causal"], " causal", ""))
    impl = every["impl"] if "impl" in every else pd.Series(contract.TRITON, index=every.index)
    data = every[impl == contract.TRITON].sort_values(["dtype", "d", "N", "causal"])
    others = every[impl != contract.TRITON]
    passed = int(data["passed"].astype(bool).sum())
    fig, ax = plt.subplots(figsize=(max(9, 0.36 * len(data)), 5.4))
    x = np.arange(len(data))
    ax.scatter(x, np.maximum(data["err_kernel_vs_fp64"], ERROR_FLOOR), zorder=3,
               label="this kernel vs float64")
    ax.scatter(x, np.maximum(data["err_torch_vs_fp64"], ERROR_FLOOR), marker="x", zorder=3,
               label="PyTorch, same dtype, vs float64")
    position = dict(zip(data["case"], x, strict=True))
    contenders = others.groupby("impl", sort=False) if len(others) else []
    for (name, part), marker in zip(contenders, "^vs<>Dph*", strict=False):
        part = part[part["case"].isin(position) & part["err_kernel_vs_fp64"].notna()]
        ax.scatter(part["case"].map(position), np.maximum(part["err_kernel_vs_fp64"], ERROR_FLOOR),
                   marker=marker, s=18, alpha=0.8, zorder=2, label=f"{name} (contender) vs float64")
    ax.step(x, data["tolerance"], where="mid", color="tab:green",
            label="pass line: max(1e-3, 2 × PyTorch's error)")
    ax.axhline(1e-3, color="tab:red", ls="--", label="1e-3 (the lab's threshold)")
    ax.set_xticks(x, data["case"], rotation=60, ha="right", fontsize=8)
    ax.set(yscale="log", ylim=(ERROR_FLOOR / 2, None),
           # two lines: on one, the rotated label is taller than the plot and runs into the title
           ylabel=f"max |error| vs float64\n(log; 0 drawn at {ERROR_FLOOR:g})",
           title=f"Correctness per case: {passed} of {len(data)} pass — {machine} "
                 f"({data['backend'].iloc[0]})")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig, data


def no_gpu_figure(title: str, reason: str):
    return _message_figure(title, reason + "\nSee results/reference/nvidia-h200/ for the committed H200 run.")




def gpu_bytes(table: pd.DataFrame, device: str):
    """DRAM bytes read per head (Nsight Compute) against the model's reads, not causal.

    One panel per head count (one head; many heads, past the L2) and head dim. The flash model
    uses the tile the kernel ran (the table's model_B_r). The floor: Q, K and V read once.
    Contenders are measured lines of their own, with no model.
    """
    rows = table[(table["status"] == contract.MEASURED) & ~table["causal"].astype(bool)].copy()
    heads = rows["B"] * rows["H"]
    rows["measured"] = rows["dram_read_bytes"] / heads
    rows["model"] = rows["model_read_bytes"] / heads
    rows["inputs"] = 3 * rows["compulsory_bytes"] / 4 / heads  # compulsory: Q, K, V and O
    long = []
    for column, kind in (("measured", "measured (DRAM)"), ("model", "model")):
        part = rows[["regime", "d", "N", "impl", column]].rename(columns={column: "bytes_per_head"})
        long.append(part.assign(kind=kind, series=part["impl"]))
    floor = rows[rows["impl"] == "flash"][["regime", "d", "N", "inputs"]]
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
                    hue_order=["naive", "flash", *contenders, "Q, K, V once"],
                    style_order=["measured (DRAM)", "model", "Q, K, V once"], facet_kws={"sharey": False})
    for ax in g.axes.flat:
        ax.set(xscale="log", yscale="log")
    g.set_axis_labels("sequence length N (log)", "bytes read per head (log)")
    g.set_titles("d = {row_name}, {col_name}")
    g.legend.set_title("")
    g.figure.suptitle(f"Bytes read from DRAM, measured with Nsight Compute on {device}, against the "
                      "model (not causal)", y=1.03, fontsize=11)
    return g.figure, data
