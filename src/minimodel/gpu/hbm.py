"""The GPU's own DRAM bytes (notes/labs.md, lab 01, asked on the device the byte model is about).

Nsight Compute (`minimodel.gpu.ncu`) reads the DRAM counters of every kernel the naive reference,
the Triton kernel and the config's contenders (`gpu.bytes.contenders`) launch, in each pass of
the plan; their sums per call are set beside the closed-form model, with the tile the kernel
really ran (`minimodel.gpu.hbm_plan`: the points, the rows and the model beside each).

How a measurement is made (`measure`): each implementation's rows whose point it runs at
(`minimodel.contenders.catalog.runs_at`) and whose tensors the device can hold are profiled:
the project's rows (naive and the kernel, both passes) in one profiled process, each contender's
in its own (`python -m minimodel.gpu.hbm_probe PLAN` under ncu): for each row, fresh inputs are
drawn and the implementation runs once unprofiled (compilation, library set-up), then a marker
kernel and the row's call run inside ncu's NVTX range. A contender that raises at a row gets a
failed row with the error; one that hangs past its `timeout_s`, or kills its process, gets a
failed row saying so, and its other rows are profiled again in a fresh process.

Without CUDA, without ncu, or without permission to read the counters, `hbm_plan.planned_rows`
gives the same points with a status that says why nothing was measured.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import torch

from minimodel.contenders.catalog import Where, runs_at
from minimodel.floor import contract
from minimodel.floor.provenance import project
from minimodel.gpu import ncu as ncu_tool
from minimodel.gpu.hbm_plan import DTYPE, model_columns, plan_indexed, planned_rows
from minimodel.gpu.hbm_probe import MARKED, PROBE, RAISED_AFTER_MARK, RESTART
from minimodel.gpu.ncu import KERNEL_COLUMNS, NCU_METRICS
from minimodel.kernel import default_bwd_config, launch_config

NO_PERMISSION = (f"{contract.NOT_MEASURED}: ncu may not read the GPU's performance counters here "
                 "(ERR_NVGPUCTRPERM; an administrator can allow it for all users)")
def _check_memory(row: dict, free_bytes: int) -> str:
    short = project.memory_shortfall(row["device_bytes"], free_bytes, 0.9, "free on the device")
    if short:
        return f"{contract.SKIPPED}: {short}; lower gpu.bytes.n or gpu.bytes.many_heads_l2_multiple"
    return contract.MEASURED


def _initial_status(row: dict, free_bytes: int, contenders: dict) -> str:
    """`contract.MEASURED` for a row to profile, else why not: where its contender does not run
    (`runs_at`; naive and the kernel run at every point), or what the device cannot hold."""
    contender = contenders.get(row["impl"])
    reason = contender and runs_at(contender, Where(row["d"], row["causal"], DTYPE), row["direction"])
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
            for i, row in plan_indexed(cfg, l2_bytes, contenders)]
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
        block_m, block_n, config = _flash_config(row) if ran_flash else (*contract.LAB_TILE, {})
        if dq_accumulation(config):
            row["dq_accumulation"] = dq_accumulation(config)
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


def dq_accumulation(config: dict) -> str | None:
    """The byte model of how the backward that ran accumulated dQ, from its recorded configuration
    (`_flash_config`'s columns): `contract.DQ_IN_L2` where the dK/dV kernel added dQ itself
    (`cfg_dq` "in_kernel"), else None (the plan's, a separate pass)."""
    return contract.DQ_IN_L2 if config.get("cfg_dq") == "in_kernel" else None


def _flash_config(row) -> tuple[int, int, dict]:
    """The tile the kernel ran at the row's shape and pass (as the probe's inputs: contiguous), and
    the columns that record its configuration: the forward's (`launch_config`), or the backward's
    dK/dV kernel's tile and the dQ kernel's beside it (`default_bwd_config`)."""
    q = torch.empty(row["B"], row["H"], row["N"], row["d"], device="cuda", dtype=torch.float16)
    if row["direction"] == contract.FORWARD:
        cfg, recorded = launch_config(q, q, q, row["causal"]), ("BLOCK_M", "BLOCK_N", "path")
        block_m, block_n = cfg.BLOCK_M, cfg.BLOCK_N
    else:
        cfg, recorded = default_bwd_config(q, row["causal"]), ("BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2",
                                                               "dkdv", "dq")
        block_m, block_n = cfg.BLOCK_M1, cfg.BLOCK_N1
    return block_m, block_n, {f"cfg_{name}": getattr(cfg, name) for name in recorded}
