"""Decode's figures (`contract.DECODE_FIGURES`, rule decode_plots): each function returns (figure,
the data it plots).

- `decode_bytes` (stage 1): the model's bytes of each scheme over the K and V caches' own against the
  KV length, and the least time those bytes allow at the configured bandwidth, batch by batch;
- `decode_bandwidth` (stage 3): GB/s of each implementation against the KV length, beside the
  machine's measured copy bandwidth, one panel per batch.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from minimodel.floor import contract
from minimodel.report.plots import IMPL_LABELS, no_gpu_figure

LABELS = {**IMPL_LABELS, contract.TRITON_ONE_SPLIT: "this kernel, one split (no combine)"}
SCHEME_STYLE = {(contract.NAIVE_SCHEME, False): ("naive decode", "tab:orange"),
                (contract.SPLIT_KV_SCHEME, False): ("split-KV, one split", "tab:blue"),
                (contract.SPLIT_KV_SCHEME, True): ("split-KV, the policy's splits", "tab:green")}


def _slice(table: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """One query length, head pair, head dim and dtype of a decode table (the first of each, 32/8
    heads where present), uniform lengths: the figures' slice, and its title."""
    t = table[~table["ragged"].astype(bool)]
    heads = list(zip(t["H_q"], t["H_kv"], strict=True))
    hq, hkv = (32, 8) if (32, 8) in heads else heads[0]
    t = t[(t["H_q"] == hq) & (t["H_kv"] == hkv)]
    lq, d, dtype = t["L_q"].min(), t["d"].iloc[0], t["dtype"].iloc[0]
    t = t[(t["L_q"] == lq) & (t["d"] == d) & (t["dtype"] == dtype)]
    return t, f"L_q = {lq}, {hq}/{hkv} heads, d = {d}, {dtype}"


def decode_bytes(table: pd.DataFrame, bandwidth: float):
    """Left: each scheme's bytes over the caches' own at the smallest batch; right: the bound time at
    `bandwidth` per batch (split-KV, one split: Q, the caches and O once)."""
    rows, title = _slice(table)
    fig = Figure(figsize=(12, 4.5))
    left, right = fig.subplots(1, 2)
    one = rows[rows["B"] == rows["B"].min()].copy()
    one["split"] = one["splits"] > 1
    plotted = []
    one["over_cache"] = one["bytes"] / one["kv_cache_bytes"]
    for (scheme, split), (label, color) in SCHEME_STYLE.items():
        line = one[(one["scheme"] == scheme) & (one["split"] == split)].sort_values("kv_len")
        if len(line):
            left.plot(line["kv_len"], line["over_cache"], "o-", color=color, label=label)
            plotted.append(line.assign(panel="bytes", label=label))
    left.axhline(1, color="black", linestyle=":", label="the K and V caches once")
    left.set(xscale="log", xlabel="KV length", ylabel="bytes moved ÷ the K and V caches' bytes",
             title=f"batch {one['B'].min()}: the caches are nearly all of it")
    left.legend()
    single = rows[(rows["scheme"] == contract.SPLIT_KV_SCHEME) & (rows["splits"] == 1)]
    for batch, line in single.groupby("B"):
        line = line.sort_values("kv_len")
        right.plot(line["kv_len"], line["bound_us"], "o-", label=f"batch {batch}")
        plotted.append(line.assign(panel="bound", label=f"batch {batch}"))
    right.set(xscale="log", yscale="log", xlabel="KV length", ylabel="least time (µs)",
              title=f"time ≥ bytes ÷ {bandwidth / 1e12:.1f} TB/s")
    right.legend()
    fig.suptitle(f"Decode's byte model ({title})")
    return fig, pd.concat(plotted, ignore_index=True) if plotted else pd.DataFrame()


def decode_bandwidth(table: pd.DataFrame, summary: dict):
    """GB/s against the KV length per implementation, one panel per batch, the copy bandwidth drawn."""
    timed = table[table["status"] == contract.OK] if "status" in table else table.iloc[:0]
    timed = timed[timed["gb_per_s"].notna()] if "gb_per_s" in timed else timed.iloc[:0]  # no interpreter rows
    if not len(timed):
        return no_gpu_figure("decode_bandwidth", summary.get("status") or "no decode point was timed"), timed
    rows, title = _slice(timed)
    batches = sorted(rows["B"].unique())
    fig = Figure(figsize=(5 * len(batches), 4.5))
    axes = fig.subplots(1, len(batches), squeeze=False)[0]
    ceiling = summary["bandwidth_bytes_per_s"] / 1e9
    top = 1.1 * max(ceiling, float(rows["gb_per_s"].max()))  # a read-only stream may pass the copy's
    for ax, batch in zip(axes, batches, strict=True):
        for impl, line in rows[rows["B"] == batch].groupby("impl", sort=False):
            line = line.sort_values("kv_len")
            ax.plot(line["kv_len"], line["gb_per_s"], "o-", label=LABELS.get(impl, impl))
        ax.axhline(ceiling, color="black", linestyle="--", label=f"copy bandwidth {ceiling:,.0f} GB/s")
        ax.set(xscale="log", xlabel="KV length", ylabel="GB/s (least bytes ÷ time)", title=f"batch {batch}",
               ylim=(0, top))
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Decode on {summary.get('device')}: {title}")
    return fig, rows
