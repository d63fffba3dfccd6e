"""The GPU's own DRAM bytes (notes/labs.md, lab 01, asked on the device the byte model is about).

Nsight Compute (`minimodel.gpu.ncu`) reads the DRAM counters of every kernel the naive reference,
the Triton kernel and the config's contenders (`gpu.bytes.contenders`) launch; their sums per call
are set beside the closed-form model of `minimodel.symbolic`, in both conventions
(`contract.CONVENTIONS`: the lab's formulas and the consistent one), with the tile the kernel
really ran. A contender's tiles are not known: its rows carry the compulsory bytes (Q, K, V read
once, O written once) and no model.

The points (`plan`): N × d × causal × two head counts × {naive, flash, each contender}, batch 1,
float16, each row's `direction` forward; then the backward's rows at the same points, naive and
flash (`minimodel.gpu.hbm_backward`).
- "one head": Q, K, V, O, and up to N ≈ 4096 even S, fit in the L2 cache;
- "many heads": enough heads that each of Q, K, V and O alone is `many_heads_l2_multiple` L2s,
  so neither the inputs nor the output can stay in it.

How a measurement is made (`measure`): the project's rows run in one profiled process, each
contender's in its own (`python -m minimodel.gpu.hbm_probe PLAN` under ncu): for each row, fresh
inputs are drawn and the implementation runs once unprofiled (compilation, library set-up), then
a marker kernel and the implementation run inside ncu's NVTX range. A contender that raises at a
row gets a failed row with the error; one that hangs past its `timeout_s`, or kills its process,
gets a failed row saying so, and its other rows are profiled again in a fresh process.

Without CUDA, without ncu, or without permission to read the counters, `planned_rows` gives
the same points with a status that says why nothing was measured.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pandas as pd
import torch

from minimodel import contract, symbolic
from minimodel.contenders.builtin import not_run_reason
from minimodel.gpu import hbm_backward
from minimodel.gpu import ncu as ncu_tool
from minimodel.gpu.hbm_probe import MARKED, PROBE, RAISED_AFTER_MARK, RESTART
from minimodel.gpu.ncu import KERNEL_COLUMNS, NCU_METRICS, NCU_OPTIONS, find_ncu  # noqa: F401
from minimodel.kernel import launch_config
from minimodel.provenance import project

DTYPE = "float16"
REGIMES = ("one head", "many heads")
NO_CUDA = f"{contract.NOT_MEASURED}: no CUDA device on this machine"
NO_NCU = (f"{contract.NOT_MEASURED}: Nsight Compute (ncu) was not found on PATH, in $CUDA_HOME/bin or "
          "/usr/local/cuda/bin; set gpu.bytes.ncu to its path")
NO_PERMISSION = (f"{contract.NOT_MEASURED}: ncu may not read the GPU's performance counters here "
                 "(ERR_NVGPUCTRPERM; an administrator can allow it for all users)")
ELEMENT_BYTES = symbolic.DTYPE_BYTES[DTYPE]
MODEL_COLUMNS = ("model_B_r", "model_B_c", "model_read_bytes", "model_write_bytes",
                 *(f"model_{convention}_bytes" for convention in contract.CONVENTIONS))


def many_heads(n: int, d: int, l2_bytes: int, multiple: float) -> int:
    """Heads that make one (1, H, N, d) float16 tensor `multiple` times the L2."""
    return max(1, math.ceil(multiple * l2_bytes / (n * d * ELEMENT_BYTES)))


def device_bytes(impl: str, heads: int, n: int, d: int) -> int:
    """What one call holds on the device: Q, K, V, O, and naive's S and P (and a causal mask)."""
    tensors = 4 * heads * n * d * ELEMENT_BYTES
    if impl == contract.NAIVE_SCHEME:
        tensors += 2 * heads * n * n * ELEMENT_BYTES + n * n  # S, P, and a bool mask
    return tensors


def plan(cfg: dict, l2_bytes: int, contenders=()) -> list[dict]:
    """Every point of `gpu.bytes`, one row per implementation: the project's rows in the order
    they are measured, then each contender's (`minimodel.contenders.Contender`) at the same points."""
    points = []
    for regime in REGIMES:
        for d in cfg["head_dims"]:
            for n in cfg["n"]:
                heads = 1 if regime == "one head" else many_heads(
                    n, d, l2_bytes, cfg["many_heads_l2_multiple"])
                points += [{"regime": regime, "B": 1, "H": heads, "N": n, "d": d, "causal": causal}
                           for causal in (False, True)]
    forward = {"direction": contract.FORWARD}
    rows = [{**point, "impl": impl, **forward} for point in points for impl in contract.BYTES_SCHEMES]
    rows += [{**point, "impl": c.name, **forward} for c in contenders for point in points]
    rows += hbm_backward.plan_rows(points)  # last: the forward's rows keep their index and seed
    held = {False: device_bytes, True: hbm_backward.device_bytes}  # by: a backward row?
    return [{**row, "dtype": DTYPE, "device_bytes": held[hbm_backward.is_backward(row)](
        row["impl"], row["H"], row["N"], row["d"])} for row in rows]


def model_columns(row: dict, block_m: int, block_n: int) -> dict:
    """The byte model at the row's point, for all its heads, with the tile the kernel ran.

    The model counts non-causal attention: a causal kernel skips the key tiles above the
    diagonal (flash reads about half the K/V), a causal naive adds a pass over S for the mask.
    A contender's row gets the compulsory bytes only: its tiles are its own.
    """
    if hbm_backward.is_backward(row):
        return hbm_backward.model_columns(row, block_m, block_n)
    n, d, heads = row["N"], row["d"], row["B"] * row["H"]
    compulsory = heads * symbolic.compulsory_bytes(n, d, ELEMENT_BYTES)
    if row["impl"] not in contract.BYTES_SCHEMES:
        return {**dict.fromkeys(MODEL_COLUMNS), "compulsory_bytes": compulsory}
    flash = row["impl"] == contract.FLASH_SCHEME
    tile = (block_m, block_n) if flash else (1, 1)  # naive has no tile
    by_direction = symbolic.model_bytes_by_direction(row["impl"], n, d, *tile, ELEMENT_BYTES)
    return {
        "model_B_r": tile[0] if flash else None,
        "model_B_c": tile[1] if flash else None,
        "model_read_bytes": heads * by_direction["R"],
        "model_write_bytes": heads * by_direction["W"],
        **{f"model_{convention}_bytes": heads * symbolic.model_bytes(row["impl"], n, d, *tile,
                                                                      ELEMENT_BYTES, convention)
           for convention in contract.CONVENTIONS},
        "compulsory_bytes": compulsory,
    }


def planned_rows(cfg: dict, l2_bytes: int, reason: str, contenders=()) -> list[dict]:
    """The plan with the model beside it and `reason` as every row's status: nothing measured."""
    return [{**row, "status": reason, "kernels": None, **dict.fromkeys(NCU_METRICS.values()),
             **model_columns(row, *contract.LAB_TILE)} for row in plan(cfg, l2_bytes, contenders)]


# ---- the profiled process -------------------------------------------------------------------

# ---- the stage ------------------------------------------------------------------------------

def _check_memory(row: dict, free_bytes: int) -> str:
    short = project.memory_shortfall(row["device_bytes"], free_bytes, 0.9, "free on the device")
    if short:
        return f"{contract.SKIPPED}: {short}; lower gpu.bytes.n or gpu.bytes.many_heads_l2_multiple"
    return contract.MEASURED


def _initial_status(row: dict, free_bytes: int, contenders: dict) -> str:
    contender = contenders.get(row["impl"])
    reason = contender and not_run_reason(contender, "cuda", DTYPE, row["d"], row["causal"], False,
                                          interpreted=False)
    return f"{contract.SKIPPED}: {reason}" if reason else _check_memory(row, free_bytes)


def measure(cfg: dict, l2_bytes: int, random_seed: int, ncu: str, workdir: str | Path,
            contenders=()) -> tuple[list[dict], pd.DataFrame]:
    """Run the plan under ncu; the rows with their measured bytes and model, and every kernel.

    The rows' order is the plan's; row i's inputs are drawn from random_seed + i. Raises
    ProbeMismatch or RuntimeError when ncu or the probe fails on the project's rows (the log's
    tail in the message); a contender's failure fails its rows only. A missing counter
    permission gives `NO_PERMISSION` rows instead.
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    free_bytes, _ = torch.cuda.mem_get_info()
    by_name = {c.name: c for c in contenders}
    rows = [{**row, "input_seed": random_seed + i, **_unmeasured(_initial_status(row, free_bytes, by_name))}
            for i, row in enumerate(plan(cfg, l2_bytes, contenders))]
    parts = []
    for contender in (None, *contenders):
        impls = contract.BYTES_SCHEMES if contender is None else (contender.name,)
        index = [i for i, row in enumerate(rows) if row["impl"] in impls]
        try:
            kernels = _profile_rows(ncu, [rows[i] for i in index], contender, workdir)
        except ncu_tool.NoCounterPermission:
            rows = planned_rows(cfg, l2_bytes, NO_PERMISSION, contenders)
            return rows, pd.DataFrame(columns=KERNEL_COLUMNS)
        kernels["row"] = [index[int(j)] if pd.notna(j) else None for j in kernels["row"]]
        parts.append(kernels)
    for row in rows:
        ran_flash = row["impl"] == contract.FLASH_SCHEME and row["status"] == contract.MEASURED
        if ran_flash and hbm_backward.is_backward(row):
            block_m, block_n, config = hbm_backward.flash_config(row)
        elif ran_flash:
            block_m, block_n, tma = _flash_config(row)
            config = {"cfg_BLOCK_M": block_m, "cfg_BLOCK_N": block_n, "cfg_TMA": tma}
        else:
            (block_m, block_n), config = contract.LAB_TILE, {}
        row.update(model_columns(row, block_m, block_n), **config)
    parts = [p for p in parts if len(p)]
    return rows, pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=KERNEL_COLUMNS)


def _unmeasured(status: str) -> dict:
    """A row's measurement columns where no number stands: its status, and nothing else."""
    return {"status": status, "kernels": None, "kernel_names": None, **dict.fromkeys(NCU_METRICS.values())}


def _profile_rows(ncu: str, rows: list[dict], contender, workdir: Path) -> pd.DataFrame:
    """Profile `rows` (the project's, or one contender's) and fill them in place; their kernels,
    `row` being the index in `rows`. A contender's process that hangs or dies fails the row it
    was at, and the rows left are profiled again in a fresh one; kernels that cannot be matched
    to its rows fail its rows, not the stage."""
    name = "project" if contender is None else f"contender_{contender.name}"
    spec = {"contender": dataclasses.asdict(contender) if contender else None}
    for attempt in range(len(rows) + 1):
        todo = [r["status"] == contract.MEASURED for r in rows]
        if not any(todo):
            return pd.DataFrame(columns=KERNEL_COLUMNS)
        profile = f"{name}_{attempt}"
        result = ncu_tool.profile(ncu, PROBE, {**spec, "rows": rows}, workdir, profile,
                                  contender.timeout_s if contender else None)
        if result.no_permission:
            raise ncu_tool.NoCounterPermission(result.log[-500:])
        if contender is None and result.returncode != 0:
            raise RuntimeError(f"ncu exited with {result.returncode}:\n{result.log[-3000:]}")
        for i, outcome in result.outcome.items():
            if outcome.startswith(contract.SKIPPED):  # the contender declined the point
                rows[i]["status"] = outcome
            elif not outcome.startswith(MARKED):
                rows[i]["status"] = f"{contract.FAILED}: {outcome}"
        unreached = [i for i, row in enumerate(rows) if todo[i] and i not in result.outcome]
        if result.returncode == 0 and not unreached:
            break
        if contender is None:
            raise ncu_tool.ProbeMismatch(f"the probe stopped before rows {unreached}:\n{result.log[-3000:]}")
        if result.returncode in (0, RESTART):  # it stopped after a recorded error that left CUDA
            continue  # unusable (ncu may or may not pass its exit code on): the rest, afresh
        reason = (f"{contract.FAILED}: " + (
            f"no answer within its time limit of {contender.timeout_s:g} s: stopped"
            if result.returncode is None else
            f"its process died (exit code {result.returncode}): {result.last_words()}"))
        # the row it was at; past the last row, every row it profiled (their report is lost)
        for i in unreached[:1] or [i for i, row in enumerate(rows) if row["status"] == contract.MEASURED]:
            rows[i]["status"] = reason
    if not any(r["status"] == contract.MEASURED for r in rows):  # every row raised: nothing was profiled
        return pd.DataFrame(columns=KERNEL_COLUMNS)
    raised = {i: o[len(RAISED_AFTER_MARK):] for i, o in result.outcome.items()
              if o.startswith(RAISED_AFTER_MARK)}  # its kernels are not a whole call
    try:
        if result.table is None:
            raise ncu_tool.ProbeMismatch(f"ncu wrote no report of the profiled rows: {result.last_words()}")
        kernels = ncu_tool.parse_ncu_csv(result.table)
        ncu_tool.assign(kernels, rows, contract.MEASURED, may_be_empty=frozenset(raised))
    except ncu_tool.ProbeMismatch as err:
        if contender is None:
            raise
        for row in rows:  # none of its numbers can be trusted to belong to its row
            if row["status"] == contract.MEASURED or row.get("kernels") is not None:
                row.update(_unmeasured(f"{contract.FAILED}: {str(err).splitlines()[0][:200]}"))
        return pd.DataFrame(columns=KERNEL_COLUMNS)
    for i, error in raised.items():
        rows[i].update(_unmeasured(f"{contract.FAILED}: {error}"))
    kernels.insert(1, "profile", profile)
    return kernels


def _flash_config(row) -> tuple[int, int, bool]:
    """The tile `flash_attn_forward` chose for the row's shape (as the probe's inputs: contiguous)."""
    q = torch.empty(row["B"], row["H"], row["N"], row["d"], device="cuda", dtype=torch.float16)
    cfg = launch_config(q, q, q, row["causal"])
    return cfg.BLOCK_M, cfg.BLOCK_N, cfg.TMA


def summary(table: pd.DataFrame, ncu: str | None, l2_bytes: int) -> dict:
    """What the stage did: measured or why not, with ncu, its options, and the device's L2."""
    statuses = table["status"].value_counts().to_dict()
    measured = int(statuses.get(contract.MEASURED, 0))
    device, device_l2 = None, None
    if measured:
        props = torch.cuda.get_device_properties(0)
        device, device_l2 = props.name, int(props.L2_cache_size)  # beside the plan's assumed l2_bytes
    status = contract.MEASURED if measured else next(iter(statuses), "no points")
    contenders = [i for i in dict.fromkeys(table["impl"]) if i not in contract.BYTES_SCHEMES]
    return {"status": status, "contenders": contenders, "measured": measured, "statuses": statuses,
            "device": device, "device_l2_bytes": device_l2, "plan_l2_bytes": l2_bytes, "ncu": ncu,
            "ncu_version": ncu_tool.ncu_version(ncu) if measured else None,
            "ncu_options": NCU_OPTIONS, "metrics": NCU_METRICS, "dtype": DTYPE}
