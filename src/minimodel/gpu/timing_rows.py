"""The rows of the timing table (gpu/timing/timing.csv), shared by the forward's timing
(`minimodel.gpu.timing`) and the backward's (`minimodel.gpu.timing_backward`): one row per
(point, implementation, direction), its rates, and the kernel's ratios within a direction."""

from __future__ import annotations

import contextlib
import logging

import torch

from minimodel import contract
from minimodel.contenders.builtin import not_run_reason

log = logging.getLogger(__name__)


def empty_row(point: dict, impl: str, flops: float, direction: str = contract.FORWARD) -> dict:
    """A timing row of `impl` at `point` before anything ran (fp16, as every timed input)."""
    return {**point, "impl": impl, "dtype": "float16", "flops": flops, "status": contract.OK,
            "checked": None, "err_vs_fp64": None, "ms": None, "eager_ms": None, "host_ms": None,
            "timing": None, "direction": direction}


@contextlib.contextmanager
def failures_in_status(row: dict):
    """Time one implementation in the block: running out of memory, or a shape its backend does not
    support, ends the block and says so in the row's status; the memory goes back after it."""
    try:
        yield
    except torch.OutOfMemoryError:
        row["status"] = "out of memory"
    except RuntimeError as err:  # a backend that does not support this shape
        row["status"] = f"unsupported: {str(err).splitlines()[0][:160]}"
    finally:
        torch.cuda.empty_cache()


def with_rates(row: dict, ceilings: dict) -> dict:
    """TFLOP/s, tokens/s and the fraction of the matmul ceiling of a row's graph time `ms`."""
    if row["ms"] is not None:
        seconds = row["ms"] * 1e-3
        row.update(tflops=row["flops"] / seconds / 1e12, tokens_per_s=row["B"] * row["N"] / seconds,
                   fraction_of_matmul_peak=row["flops"] / seconds / ceilings["peak_flops_per_s"])
    log.info("%s B=%d H=%d N=%d d=%d causal=%s %s %s: %s (%s)", row["grid"], row["B"], row["H"], row["N"],
             row["d"], row["causal"], row["impl"], row.get("direction", contract.FORWARD),
             f"{row['ms']:.4g} ms" if row["ms"] is not None else "no time", row["status"])
    return row


def add_ratios(rows: list[dict]) -> None:
    """Kernel speedup over naive and the kernel's ratio to every other implementation, per point
    and direction (a row without `direction` is the forward's)."""
    points: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        key = (r["grid"], r["B"], r["H"], r["N"], r["d"], r["causal"], r.get("direction", contract.FORWARD))
        points.setdefault(key, {})[r["impl"]] = r
    for impls in points.values():
        triton_ms = impls.get(contract.TRITON, {}).get("ms")
        for r in impls.values():
            r["triton_speedup_over_this"] = (r["ms"] / triton_ms
                                             if r["ms"] and triton_ms else None)


def contender_skip_reason(contender, row: dict) -> str | None:
    """Why a contender is not timed at a row's point: what it supports, a built-in missing on this
    machine, or a grid it is not timed on."""
    reason = not_run_reason(contender, "cuda", "float16", row["d"], row["causal"], False, interpreted=False)
    if row["grid"] not in contender.grids:
        reason = reason or f"{contender.name} is timed on the {', '.join(contender.grids)} grid only"
    return reason
