"""The rows of the timing table (gpu/timing/timing.csv): one row per (point, implementation,
direction), the status of one that gave no time, its rates, and the kernel's ratios within a
direction; and the long table of the samples behind each row's median (gpu/timing/samples.csv)."""

from __future__ import annotations

import contextlib
import logging

import torch

from minimodel.floor import contract
from minimodel.floor.timers import release_memory

log = logging.getLogger(__name__)

KEY = contract.TIMING_KEY  # a row's key, and its samples'


class Declined(Exception):
    """The implementation declined this point (a contender's NotImplementedError): a skipped row."""


class Failed(Exception):
    """The implementation's call failed at this point, for the reason in the message."""


def empty_row(point: dict, impl: str, flops: float, direction: str = contract.FORWARD) -> dict:
    """A timing row of `impl` at `point` before anything ran (fp16, as every timed input)."""
    return {**point, "impl": impl, "dtype": "float16", "flops": flops, "status": contract.OK,
            "checked": None, "err_vs_fp64": None, "ms": None, "samples": None, "interleaved": None,
            "eager_ms": None, "host_ms": None, "timing": None, "direction": direction}


@contextlib.contextmanager
def failures_in_status(row: dict):
    """Time one implementation in the block: a point it declines, a failed call, running out of
    memory, or a shape its backend does not support ends the block and says so in the row's
    status (its times cleared); the memory goes back after it."""
    try:
        yield
    except Declined as why:
        row["status"] = f"{contract.SKIPPED}: {why}"
    except Failed as why:
        row["status"] = f"{contract.FAILED}: {why}"
    except torch.OutOfMemoryError:
        row["status"] = contract.OUT_OF_MEMORY
    except RuntimeError as err:  # a backend that does not support this shape
        first = str(err).splitlines()[0][:160] if str(err) else type(err).__name__
        row["status"] = f"{contract.UNSUPPORTED}: {first}"
    else:
        torch.cuda.empty_cache()
        return
    release_memory()  # out of the except: what the failed call's traceback held is collected too
    row.update(ms=None, samples=None, eager_ms=None, host_ms=None, timing=None)


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
