"""The results README's decode answers (notes/labs.md, "Decode"), every number from the run's decode
tables: where decode sits on the roofline, what the split-KV decode costs in bytes and buys in
time, and how close each implementation comes to the copy bandwidth.

`answers(paths)` reads `symbolic` (`contract.DECODE_SYMBOLIC`), `cpu` (`DECODE_CPU`), `gpu`
(`DECODE_GPU`), `gpu_summary` (`DECODE_GPU_SUMMARY`) and the timing stage's summary `timing` (its
peak FLOP/s and copy bandwidth: the GPU's ridge point).
"""

from __future__ import annotations

import json

import pandas as pd

from minimodel.floor import contract


def headline_point(table: pd.DataFrame) -> pd.Series:
    """The model's row of the point the answers quote: one new token, batch 1, 32/8 heads where the
    grid has them, the largest head dim, the longest cache, uniform lengths, the first dtype; the
    split-KV decode with one split."""
    t = table[(table["scheme"] == contract.SPLIT_KV_SCHEME) & (table["splits"] == 1)
              & ~table["ragged"].astype(bool)]
    t = t[(t["L_q"] == t["L_q"].min()) & (t["B"] == t["B"].min())]
    heads = set(zip(t["H_q"], t["H_kv"], strict=True))
    hq, hkv = (32, 8) if (32, 8) in heads else sorted(heads)[0]
    t = t[(t["H_q"] == hq) & (t["H_kv"] == hkv)]
    t = t[(t["d"] == t["d"].max()) & (t["dtype"] == t["dtype"].iloc[0])]
    return t.loc[t["kv_len"].idxmax()]


def _at(table: pd.DataFrame, point: pd.Series) -> pd.DataFrame:
    keys = ["B", "L_q", "H_q", "H_kv", "d", "kv_len", "ragged", "dtype"]
    return table[(table[keys] == point[keys]).all(axis=1)]


def model_answers(table: pd.DataFrame) -> dict:
    """Stage 1's: the headline point's bytes, intensity and bound; what the naive decode and the
    split partials add; the intensity's range over the grid."""
    point = headline_point(table)
    rows = _at(table, point)
    naive = rows[rows["scheme"] == contract.NAIVE_SCHEME]["bytes"].iloc[0]
    split = rows[(rows["scheme"] == contract.SPLIT_KV_SCHEME) & (rows["splits"] > 1)]
    return {"point": {k: (v.item() if hasattr(v, "item") else v) for k, v in point.items()
                      if k in ("B", "L_q", "H_q", "H_kv", "d", "kv_len", "dtype")},
            "bytes": float(point["bytes"]), "cache_share": float(point["kv_cache_bytes"] / point["bytes"]),
            "intensity": float(point["intensity"]), "bound_us": float(point["bound_us"]),
            "naive_over_split": float(naive / point["bytes"]),
            "splits": int(split["splits"].iloc[0]) if len(split) else 1,
            "partials_share": float(split["bytes"].iloc[0] / point["bytes"] - 1) if len(split) else 0.0,
            "intensity_max": float(table["intensity"].max()), "points": int(len(table.drop_duplicates(
                ["B", "L_q", "H_q", "H_kv", "d", "kv_len", "ragged", "dtype"])))}


def gpu_answers(gpu: pd.DataFrame, summary: dict, timing: dict) -> dict:
    """Stage 3's, where it timed: each implementation's best and median fraction of the copy
    bandwidth, and the kernel's split count's gain over one split where B × H_kv leaves SMs idle."""
    timed = (gpu[(gpu["status"] == contract.OK) & (gpu["backend"] == "cuda")] if "gb_per_s" in gpu
             else gpu.iloc[:0])
    ceilings = timing.get("ceilings") or {}
    out = {"timed": bool(len(timed)), "device": summary.get("device"), "status": summary.get("status", ""),
           "rotation": summary.get("rotation", "")}
    if not len(timed):
        if not out["status"]:  # a GPU that timed no point: why, from the rows' statuses
            cuda = gpu[gpu["backend"] == "cuda"] if "backend" in gpu else gpu
            why = ", ".join(f"{n} {s}" for s, n in cuda["status"].value_counts().items()) or "no timed points"
            out["status"] = f"on {out['device']} no point passed its check and was timed ({why})"
        return out
    out["bandwidth_gbs"] = summary["bandwidth_bytes_per_s"] / 1e9
    out["ridge"] = ceilings["peak_flops_per_s"] / ceilings["bandwidth_bytes_per_s"] if ceilings else None
    out["impls"] = (timed.groupby("impl", sort=False)["fraction_of_copy_bandwidth"]
                    .agg(best="max", median="median", points="count").reset_index().to_dict("records"))
    keys = ["B", "L_q", "H_q", "H_kv", "d", "kv_len", "ragged", "dtype"]
    kernel = timed[timed["impl"] == contract.TRITON].set_index(keys)
    one = timed[timed["impl"] == contract.TRITON_ONE_SPLIT].set_index(keys)
    both = kernel.index.intersection(one.index)
    gain = (one.loc[both, "ms"] / kernel.loc[both, "ms"]).rename("gain").reset_index()
    gain["programs"] = gain["B"] * gain["H_kv"]
    split = gain.merge(kernel.loc[both, ["cfg_splits"]].reset_index(), on=keys)
    few = split[split["cfg_splits"] > 1]
    out["split_gain"] = {"best": float(few["gain"].max()) if len(few) else None,
                         "best_at": few.loc[few["gain"].idxmax(), keys].to_dict() if len(few) else None,
                         "points": int(len(few)),
                         "one_split_points": int((split["cfg_splits"] == 1).sum())}
    return out


def answers(paths: dict) -> dict:
    """Every decode number the README states (module docstring)."""
    symbolic = pd.read_csv(paths["symbolic"])
    cpu = pd.read_csv(paths["cpu"])
    summary = json.loads(open(paths["gpu_summary"]).read())
    timing = json.loads(open(paths["timing"]).read())
    return {"model": model_answers(symbolic),
            "cpu": {"rows": int(len(cpu)), "worst_deviation": float(cpu["deviation"].abs().max())
                    if len(cpu) else None},
            "gpu": gpu_answers(pd.read_csv(paths["gpu"]), summary, timing),
            "kernel_interpreter_passed": summary.get("kernel_passed")}
