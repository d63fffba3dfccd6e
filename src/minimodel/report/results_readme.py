"""The results README: the labs' questions answered with the numbers of one run.

`collect()` reads the run's tables into one dict of numbers (each with the machine it came from);
`render()` fills the Jinja template `workflow/report/README.md.j2`, whose hand-written parts say
what the numbers cannot (where Triton tripped, what FlashAttention-2 changes). Nothing numeric is
typed into the template: tests check that the README's numbers equal the tables'.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jinja2
import numpy as np
import pandas as pd

from minimodel.floor import contract
from minimodel.floor.byte_model import forward as model
from minimodel.floor.byte_model.theory import practice_problems
from minimodel.report import backward_answers

MiB = 2**20


def _json(path):
    return json.loads(Path(path).read_text())


def bytes_answers(symbolic_table: pd.DataFrame, cpu_bytes: pd.DataFrame) -> dict:
    """Lab 01 Q1: naive/flash bytes per N from the model, and where flash wins.

    At the lab's 64 × 64 tile when the table has it, else at the table's first tile.
    """
    symbolic_table, cpu_bytes = contract.forward_rows(symbolic_table), contract.forward_rows(cpu_bytes)
    tiles = list(dict.fromkeys(zip(symbolic_table["B_r"], symbolic_table["B_c"], strict=True)))
    block_r, block_c = contract.LAB_TILE if contract.LAB_TILE in tiles else tiles[0]  # lab 01's tile
    t = symbolic_table[(symbolic_table["convention"] == contract.CONSISTENT_CONVENTION)
                       & (symbolic_table["B_r"] == block_r)
                       & (symbolic_table["B_c"] == block_c)]
    rows = []
    for (d, dtype), g in t.groupby(["d", "dtype"]):
        naive_scheme = (contract.NAIVE_FP32_SOFTMAX_SCHEME if model.DTYPE_BYTES[dtype] == 2
                        else contract.NAIVE_SCHEME)
        for naive_name in sorted({contract.NAIVE_SCHEME, naive_scheme}):
            naive = g[g["scheme"] == naive_name].set_index("N")["bytes"]
            flash = g[g["scheme"] == contract.FLASH_SCHEME].set_index("N")["bytes"]
            ratio = (naive / flash).dropna()
            wins = ratio[ratio > 1]
            rows.append({"d": int(d), "dtype": dtype, "naive_scheme": naive_name,
                         "first_n_flash_fewer_bytes": int(wins.index.min()) if len(wins) else None,
                         "ratio_smallest_n": float(ratio.iloc[0]), "smallest_n": int(ratio.index[0]),
                         "ratio_largest_n": float(ratio.iloc[-1]), "largest_n": int(ratio.index[-1])})
    return {"model": rows, "B_r": int(block_r), "B_c": int(block_c),
            "worst_abs_deviation": float(cpu_bytes["deviation"].abs().max())}


def intensity_question(n: int = 8192, d: int = 128, b: int = contract.LAB_TILE[0],
                       dtype_bytes: int = 2) -> dict:
    """Lab 01 Q2, with the arithmetic laid out."""
    naive = model.model_bytes(contract.NAIVE_SCHEME, n, d, b, b, dtype_bytes)
    flash = model.model_bytes(contract.FLASH_SCHEME, n, d, b, b, dtype_bytes)
    naive32 = model.model_bytes(contract.NAIVE_FP32_SOFTMAX_SCHEME, n, d, b, b, dtype_bytes)
    f = model.flops(n, d)
    return {"N": n, "d": d, "B": b, "dtype_bytes": dtype_bytes, "flops": f,
            "naive_bytes": naive, "flash_bytes": flash, "naive_fp32_softmax_bytes": naive32,
            "intensity_naive": f / naive, "intensity_flash": f / flash,
            "ratio": naive / flash, "ratio_fp32_softmax": naive32 / flash,
            "lab_ratio": (model.bytes_naive(n, d, dtype_bytes)
                           / model.bytes_flash(n, d, b, b, dtype_bytes))}


def gpu_answers(timing: dict, rows: pd.DataFrame) -> dict | None:
    if timing.get("device") is None:
        return None
    lab = rows[rows["grid"] == contract.LAB_GRID]
    columns = ["N", "causal", "triton_speedup_over_this", "ms", "eager_ms"]
    speedups = lab[lab["impl"] == contract.NAIVE][columns]
    kernel = lab[lab["impl"] == contract.TRITON][["N", "causal", "ms", "eager_ms"]]
    speedups = speedups.merge(kernel, on=["N", "causal"], suffixes=("", "_kernel"))
    speedups["eager_speedup"] = speedups["eager_ms"] / speedups["eager_ms_kernel"]
    pred = {p["N"]: p["predicted_speedup"] for p in timing["lab_grid_predictions_from_gpu_ceilings"]}
    fa = rows[(rows["grid"] == contract.FLASHATTENTION_GRID) & rows["impl"].isin(contract.SDPA_BACKENDS)]
    ratios = fa.pivot_table(index=["d", "N", "causal"], columns="impl",
                            values="triton_speedup_over_this").reset_index()
    triton = rows[(rows["grid"] == contract.FLASHATTENTION_GRID) & (rows["impl"] == contract.TRITON)]
    return {
        "device": timing["device"], "torch": timing["torch"], "triton": timing["triton"],
        "peak_tflops": timing["ceilings"]["peak_flops_per_s"] / 1e12,
        "bandwidth_tbs": timing["ceilings"]["bandwidth_bytes_per_s"] / 1e12,
        "lab_speedups": [{**r, "predicted": pred.get(r["N"])} for r in speedups.to_dict("records")],
        "max_prediction": max(pred.values()),
        "ratios": ratios.to_dict("records"),
        "kernel_tflops_max": float(triton["tflops"].max()),
        "kernel_tflops_min": float(triton["tflops"].min()),
    }


def gpu_bytes_answers(table: pd.DataFrame, summary: dict, n: int = 4096, d: int = 64) -> dict:
    """Lab 01 on the GPU: DRAM bytes against the model at (n, d) (or the nearest measured point),
    one head and many heads, not causal; and how close the model is over every measured N."""
    if not summary["measured"]:
        return {"measured": False, "status": summary["status"]}
    set_aside = table[table["status"] != contract.MEASURED]
    rows = table[(table["status"] == contract.MEASURED) & ~table["causal"].astype(bool)].copy()
    d = d if d in set(rows["d"]) else int(rows["d"].min())
    rows = rows[rows["d"] == d]
    n = int(min(set(rows["N"]), key=lambda x: abs(x - n)))
    inputs = 3 * rows["compulsory_bytes"] / 4  # Q, K and V once (compulsory: Q, K, V, O)
    rows["read_over_model"] = rows["dram_read_bytes"] / rows["model_read_bytes"]
    rows["read_over_inputs"] = rows["dram_read_bytes"] / inputs
    rows["stored_over_model"] = rows["l2_write_bytes"] / rows["model_write_bytes"]
    many_naive = rows[(rows["regime"] == "many heads") & (rows["impl"] == contract.NAIVE_SCHEME)]
    flash = rows[rows["impl"] == contract.FLASH_SCHEME]
    ours = rows["impl"].isin([contract.NAIVE_SCHEME, contract.FLASH_SCHEME])  # the rest: contenders
    rows["stored_over_output"] = rows["l2_write_bytes"] / (rows["compulsory_bytes"] / 4)  # O once

    def span(column):
        return float(column.min()), float(column.max())

    contenders = [{"name": name, "points": len(part), "read_over_inputs": span(part["read_over_inputs"]),
                   "stored_over_output": span(part["stored_over_output"])}
                  for name, part in rows[~ours].groupby("impl", sort=False)]
    return {
        "measured": True, "device": summary["device"], "device_l2_bytes": summary["device_l2_bytes"],
        "set_aside": set_aside[["regime", "H", "N", "d", "causal", "impl", "status"]].to_dict("records"),
        "N": n, "d": d, "ncu_version": summary["ncu_version"],
        "rows": rows[rows["N"] == n].sort_values(["regime", "impl"], ascending=[False, True])
        .to_dict("records"),
        "n_min": int(rows["N"].min()), "n_max": int(rows["N"].max()),
        "naive_many_read_over_model": (float(many_naive["read_over_model"].min()),
                                       float(many_naive["read_over_model"].max())),
        "flash_read_over_inputs_max": float(flash["read_over_inputs"].max()),
        "flash_model_read_over_dram": (float((1 / flash["read_over_model"]).min()),
                                       float((1 / flash["read_over_model"]).max())),
        "stored_over_model": span(rows[ours]["stored_over_model"]),
        "contenders": contenders,
    }


def _counts(rows: pd.DataFrame) -> dict:
    """One pass's cases of one implementation: passed, failed, skipped, ran, the first failure's
    reason and the first skip's (say, why a contender has no backward). A case that ran passes only
    where its `passed` is true: a missing verdict is a failure, never a pass."""
    skipped = rows["skipped"].eq(True)
    ran = rows[~skipped]
    failed = ran[~ran["passed"].eq(True)]
    reasons = rows["reason"].fillna("").astype(str) if "reason" in rows else pd.Series("", index=rows.index)
    return {"passed": len(ran) - len(failed), "failed": len(failed), "skipped": int(skipped.sum()),
            "ran": len(ran), "first_failure": reasons[failed.index].iloc[0] if len(failed) else "",
            "first_skip": reasons[skipped].iloc[0] if skipped.any() else ""}


def contenders(correctness_rows: pd.DataFrame, timing_rows: pd.DataFrame) -> list[dict]:
    """Each contender's correctness counts in the rows given (one pass's: `_counts`), and where it
    was timed the geometric mean over FlashAttention's grid of the kernel's speed over its speed."""
    if "impl" not in correctness_rows:
        return []
    found = []
    names = [n for n in dict.fromkeys(correctness_rows["impl"]) if n != contract.TRITON]
    names += [n for n in dict.fromkeys(timing_rows.get("impl", pd.Series(dtype=str)))
              if n not in contract.IMPLEMENTATIONS and n not in names]
    for name in names:
        timed = timing_rows[(timing_rows.get("impl") == name)
                            & (timing_rows["grid"] == contract.FLASHATTENTION_GRID)]
        timed = timed[timed["status"] == contract.OK]  # a point that failed its check has no fair time
        ratios = timed["triton_speedup_over_this"].dropna() if "triton_speedup_over_this" in timed else []
        found.append({"name": name, **_counts(correctness_rows[correctness_rows["impl"] == name]),
                      "kernel_over_this": float(np.exp(np.log(ratios).mean())) if len(ratios) else None,
                      "timed_points": len(ratios)})
    return found


def passes(cases: pd.DataFrame, impl: str) -> dict:
    """An implementation's cases per pass, `forward` and `gradients` (None where the run checked no
    backward), and `failed`: the cases it failed in either pass, so that no summary calls it
    passing over a failed gradient."""
    cases = contract.with_direction(cases)
    mine = cases[cases["impl"] == impl] if "impl" in cases else cases
    backward = mine[mine["direction"] == contract.BACKWARD]
    found = {"forward": _counts(mine[mine["direction"] == contract.FORWARD]),
             "gradients": _counts(backward) if len(backward) else None}
    found["failed"] = sum(p["failed"] for p in (found["forward"], found["gradients"]) if p)
    return found


def contender_passes(cases: pd.DataFrame, timing_rows: pd.DataFrame) -> list[dict]:
    """Each contender (its name and timing, `contenders`) with its cases per pass (`passes`): the
    README's and the report's first page's contender lines."""
    return [{"name": c["name"], "kernel_over_this": c["kernel_over_this"], "timed_points": c["timed_points"],
             **passes(cases, c["name"])} for c in contenders(contract.forward_rows(cases), timing_rows)]


def kernel_gradients(cases: pd.DataFrame, summary: dict | None) -> dict | None:
    """The kernel's gradient cases (dQ, dK, dV; `passes`) and each gradient's largest error against
    float64 (the correctness summary's `backward`); None where the run checked no backward."""
    found = passes(cases, contract.TRITON)["gradients"]
    if found is None:
        return None
    largest = {g: (summary or {}).get(f"max_err_{g}_kernel_vs_fp64") for g in ("dq", "dk", "dv")}
    return {**found, "max_err": {g: e for g, e in largest.items() if e is not None}}


def why_not_measured(status: str) -> str:
    """A stage's status as the reason it measured nothing, without a leading "not measured: " (the
    sentence around it says so already); the template's filter `why`."""
    return status.removeprefix(f"{contract.NOT_MEASURED}: ")


def collect(paths: dict) -> dict:
    """Every number the README states, from the run's files (keys of `paths`: see the readme rule)."""
    ceilings = _json(paths["cpu_ceilings"])
    timing = _json(paths["timing"])
    corr = _json(paths["correctness"])
    every_case = pd.DataFrame(corr["cases_detail"])
    every_row = contract.forward_rows(every_case)  # the forward's; both passes: `passes`
    timing_rows = pd.read_csv(paths["timing_table"])
    forward_timing = contract.forward_rows(timing_rows)
    symbolic_rows = pd.read_csv(paths["symbolic"])
    # the kernel's rows (a run from before contenders has only those, and no impl column)
    impl = every_row["impl"] if "impl" in every_row else pd.Series(contract.TRITON, index=every_row.index)
    corr_rows = every_row[impl == contract.TRITON]
    ran = corr_rows[~corr_rows["skipped"].astype(bool)]
    lab_cases = ran[ran["group"] == contract.LAB_CASES]
    bench = {Path(p).stem: float(pd.read_csv(p, sep="\t")["s"].iloc[0]) for p in paths["benchmarks"]}
    cpu_stage = [v for k, v in bench.items() if k.startswith("cpu_")]
    return {
        "cpu_device": ceilings["device"],
        "cpu": {"peak_gflops": ceilings["peak_flops_per_s"] / 1e9,
                "bandwidth_gbs": ceilings["bandwidth_bytes_per_s"] / 1e9,
                "prediction": ceilings["prediction"], "references": ceilings["references"],
                "stage_seconds_sum": sum(cpu_stage), "stage_seconds_max": max(cpu_stage, default=0.0),
                "benchmarks": bench},
        "bytes": bytes_answers(symbolic_rows, pd.read_csv(paths["cpu_bytes"])),
        "intensity": intensity_question(),
        "practice": practice_problems(),
        "correctness": {
            "backend": corr["backend"], "device": timing.get("device") or ceilings["device"],
            "all_passed": corr["all_passed"], "ran": corr["ran"], "skipped": corr["skipped"],
            "failed": corr["failed"],
            "max_err_kernel": corr["max_err_kernel_vs_fp64"], "max_err_torch": corr["max_err_torch_vs_fp64"],
            "lab_cases": lab_cases.sort_values(["dtype", "N", "causal"]).to_dict("records"),
            "fp16_all_under_1e-3": bool((ran[ran["dtype"] == "float16"]["err_kernel_vs_fp64"] < 1e-3).all()),
            "literal_all_pass": corr["lab_literal_all_pass"],
            "torch_fp16_causal_err": float(ran[(ran["dtype"] == "float16") & ran["causal"].astype(bool)]
                                           ["err_torch_vs_fp64"].max()),
            "gradients": kernel_gradients(every_case, corr.get("backward")),
        },
        "contenders": contender_passes(every_case, forward_timing),
        "gpu": gpu_answers(timing, forward_timing),
        "gpu_bytes": gpu_bytes_answers(contract.forward_rows(pd.read_csv(paths["gpu_bytes"])),
                                       _json(paths["gpu_bytes_summary"])),
        "backward": backward_answers.answers(symbolic_rows, ceilings, timing, timing_rows),
    }


def markdown_cell(text) -> str:
    """Free text (a failure's reason) as one cell of a markdown table: one line, `|` escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def rst_text(text) -> str:
    """Free text as reStructuredText that shows it as it is: one line, every markup character
    escaped (a reason's `*`, `_` or backquote would otherwise start markup, or a warning)."""
    return re.sub(r"([\\`*_|<>\[\]:])", r"\\\1", " ".join(str(text).split()))


def render(template_path: str | Path, numbers: dict) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(Path(template_path).parent)),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True)
    env.filters["mib"] = lambda b: "—" if b is None or b != b else f"{b / MiB:,.1f} MiB"  # None, NaN: none
    env.filters["sci"] = lambda x: f"{x:.2e}"
    env.filters["f2"] = lambda x: f"{x:,.2f}"
    env.filters["f1"] = lambda x: f"{x:,.1f}"
    env.filters["int"] = lambda x: f"{int(x):,}"
    env.filters["why"] = why_not_measured
    env.filters["cell"] = markdown_cell
    env.filters["rst"] = rst_text
    return env.get_template(Path(template_path).name).render(**numbers)
