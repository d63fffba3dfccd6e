"""decode (`symbolic/decode/`, `cpu/decode/`, `gpu/decode/`): the model's rows and the CPU's counted
bytes do not depend on the machine: identical. On the GPU each (point, implementation)'s status
equal; where both runs timed it on one GPU model, its GB/s within GBS_TOLERANCE of the reference's
(a median of interleaved CUDA-graph samples, its caches rotated past the L2). A run made before
decode has none of these tables: not comparable, named."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from minimodel.floor import contract, decode_grid
from minimodel.report import runs
from minimodel.report.compare.rows import (
    AGREE,
    DISAGREE,
    device_mismatch,
    exact,
    missing,
    only_in,
    relative,
    row,
    status_differs,
    words,
)

NAME = "decode"
TIMING = "decode timing"  # the part of the GB/s rows
READS = (contract.DECODE_SYMBOLIC, contract.DECODE_CPU, contract.DECODE_GPU, contract.DECODE_GPU_SUMMARY)
GBS_TOLERANCE = 0.10
TOLERANCES = {TIMING: GBS_TOLERANCE}

KEY = list(decode_grid.KEY)
MODEL = ["bytes", "bytes_read", "bytes_written", "flops"]
COUNTED = ["bytes_model", "bytes_instrumented", "bytes_read", "bytes_written"]


def compare(run: Path, ref: Path) -> list[dict]:
    rows = []
    a, b = (runs.table(f, contract.DECODE_SYMBOLIC, KEY + ["scheme", "splits"] + MODEL) for f in (run, ref))
    rows += exact(NAME, a, b, KEY + ["scheme", "splits"], MODEL, contract.DECODE_SYMBOLIC, "model: ")
    keys = KEY + ["scheme", "splits", "block_n", "sram_bytes"]
    a, b = (runs.table(f, contract.DECODE_CPU, keys + COUNTED) for f in (run, ref))
    rows += exact(NAME, a, b, keys, COUNTED, contract.DECODE_CPU, "cpu: ")
    return rows + _gpu(run, ref)


def _gpu(run: Path, ref: Path) -> list[dict]:
    keys = KEY + ["impl", "backend"]
    a, b = (runs.table(f, contract.DECODE_GPU, keys + ["status"]) for f in (run, ref))
    if a is None or b is None:
        for folder in (run, ref):
            runs.summary(folder, contract.DECODE_GPU_SUMMARY)
        return missing(NAME, contract.DECODE_GPU, a)
    a, b = (f.assign(status=words(f["status"])).set_index(keys) for f in (a, b))
    rows = only_in(NAME, set(a.index), set(b.index), prefix="gpu: ")
    common = a.index.intersection(b.index)
    for key in common:
        x, y = a.loc[key, "status"], b.loc[key, "status"]
        rows.append(row(NAME, "gpu: " + _label(keys, key), "status", x, y,
                        verdict=AGREE if x == y else DISAGREE, reason="" if x == y else status_differs(x, y)))
    unlike = device_mismatch(TIMING, run, ref, contract.DECODE_GPU_SUMMARY, "device",
                             "has no GPU timing", "the runs timed decode on different GPU models")
    if unlike:
        return rows + unlike
    # the timed rows (the interpreter's check of the kernel is ok with no time)
    timed = [k for k in common if a.loc[k, "status"] == contract.OK == b.loc[k, "status"]
             and "gb_per_s" in a and "gb_per_s" in b
             and pd.notna(a.loc[k, "gb_per_s"]) and pd.notna(b.loc[k, "gb_per_s"])]
    for key in timed:
        x, y = float(a.loc[key, "gb_per_s"]), float(b.loc[key, "gb_per_s"])
        diff = relative(x, y)
        rows.append(row(TIMING, _label(keys, key), "gb_per_s", x, y, diff, GBS_TOLERANCE,
                        AGREE if diff <= GBS_TOLERANCE else DISAGREE,
                        "" if diff <= GBS_TOLERANCE else f"GB/s moved {diff:.0%}, past {GBS_TOLERANCE:.0%}"))
    return rows


def _label(keys: list[str], key) -> str:
    return ", ".join(f"{k}={v}" for k, v in zip(keys, key, strict=True))
