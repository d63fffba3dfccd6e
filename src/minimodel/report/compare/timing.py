"""timing (`gpu/timing/`): on the same GPU model, the ratios that should travel (kernel against
SDPA's cuDNN and FlashAttention-2 backends, against naive PyTorch, and against each contender)
within the band of their grid (`timing_band`), per pass (`direction`: the forward, the backward
alone, the two together; a table without the column is all forward), each pass's ratios against
the same implementation's same pass; on another GPU, or without one, not comparable."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from minimodel import contract
from minimodel.report import runs
from minimodel.report.compare.rows import (
    AGREE,
    DISAGREE,
    device_mismatch,
    label_direction,
    missing,
    only_in,
    per_direction,
    relative,
    row,
    unique,
)

NAME = "timing"
READS = (contract.TIMING, contract.TIMING_SUMMARY)
# The kernel's speed against another implementation (their time over the kernel's), by metric name.
RATIOS = dict(zip(("kernel/cudnn", "kernel/fa2", "kernel/naive"),
                  (contract.SDPA_CUDNN, contract.SDPA_FLASH, contract.NAIVE), strict=True))


def timing_band(grid: str, n: int) -> float:
    """Largest relative change of a speed ratio between two runs on one GPU model that is noise.

    Graph timings repeat within ±2 % on FlashAttention's grid, and SDPA's cuDNN itself moves a
    few percent between runs: 5 % for a ratio of two such times. The lab grid's N < 1024
    kernels take 3–21 µs, where a launch's jitter is a large part: 25 %; its larger N, 10 %.
    """
    if grid == contract.FLASHATTENTION_GRID:
        return 0.05
    return 0.10 if n >= 1024 else 0.25


TOLERANCES = {f"timing {grid}{above}": timing_band(grid, n) for grid, above, n in
              ((contract.FLASHATTENTION_GRID, "", 4096), (contract.LAB_GRID, " N>=1024", 1024),
               (contract.LAB_GRID, " N<1024", 64))}


def ratios(timing: pd.DataFrame) -> pd.DataFrame:
    """Per pass, point and ratio name: another implementation's time over the kernel's
    (kernel/<contender>), both of the same pass (`direction`)."""
    point = ["direction", "grid", "B", "H", "N", "d", "causal"]
    timing = contract.with_direction(timing)
    ok = timing[timing["status"] == contract.OK]
    ms = ok.pivot_table(index=point, columns="impl", values="ms", aggfunc="first")
    kernel = contract.TRITON
    names = RATIOS | {f"kernel/{i}": i for i in ms.columns if i not in contract.IMPLEMENTATIONS}
    out = pd.DataFrame({name: ms[impl] / ms[kernel] for name, impl in names.items()
                        if impl in ms and kernel in ms})
    if out.empty:  # nothing timed, or not the kernel: no ratio
        return pd.DataFrame(columns=[*point, "metric", "ratio"])
    out.columns.name = "metric"
    return out.stack().rename("ratio").reset_index()


def compare(run: Path, ref: Path) -> list[dict]:
    mismatch = device_mismatch(NAME, run, ref, contract.TIMING_SUMMARY, "device", "had no GPU timing",
                               "different GPU models: speed ratios do not travel between them")
    if mismatch:
        return mismatch
    point = ["grid", "B", "H", "N", "d", "causal", "metric"]
    a, b = (runs.table(folder, contract.TIMING, point[:-1] + ["impl", "ms", "status"])
            for folder in (run, ref))
    if a is None or b is None:
        return missing(NAME, contract.TIMING, a)
    a, b = (contract.with_direction(t) for t in (a, b))
    # a pass timed in one run only is said so; the ratios of a pass both timed are judged
    return per_direction(NAME, contract.TIMING, a, b, lambda a, b, direction: judge(
        ratios(a), ratios(b), direction, point))


def judge(a: pd.DataFrame, b: pd.DataFrame, direction: str, point: list[str]) -> list[dict]:
    """One pass's ratios, each within its grid's band."""
    unique({"run": a, "reference": b}, point, contract.TIMING)
    keys = [set(map(tuple, t[point].itertuples(index=False))) for t in (a, b)]
    rows = only_in(NAME, *keys, "a grid point or contender the other lacks, or a point not timed there",
                   prefix=label_direction(direction))
    for _, r in a.merge(b, on=point, suffixes=("_run", "_ref")).iterrows():
        band = timing_band(r["grid"], int(r["N"]))
        diff = relative(r["ratio_run"], r["ratio_ref"])
        label = (f"{label_direction(direction)}{r['grid']} ({r['B']}, {r['H']}, {r['N']}, {r['d']}) "
                 f"{'causal' if r['causal'] else 'full'}")
        metric = r["metric"] if direction == contract.FORWARD else f"{r['metric']} ({direction})"
        rows.append(row(NAME, label, metric, r["ratio_run"], r["ratio_ref"], diff, band,
                        AGREE if diff <= band else DISAGREE))
    return rows
