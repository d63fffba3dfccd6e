"""CPU bytes (`cpu/bytes.csv`): the instrumented counts and the model do not depend on the
machine: identical. torch.profiler's allocated bytes ("cpu profiler") within PROFILER_TOLERANCE.
Per pass (`direction`: a table without the column is all forward); the backward's rows keyed on
their dQ accumulation too, their gradients' counted writes compared as well."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from minimodel.floor import contract
from minimodel.report import runs
from minimodel.report.compare.rows import (
    AGREE,
    DISAGREE,
    NOT_COMPARABLE,
    exact,
    label_direction,
    per_direction,
    relative,
    row,
)

NAME = "cpu bytes"
PROFILER = "cpu profiler"  # the part of the profiler's rows
READS = (contract.CPU_BYTES,)
PROFILER_TOLERANCE = 0.05
TOLERANCES = {PROFILER: PROFILER_TOLERANCE}


KEYS = ["scheme", "N", "d", "dtype", "B_r", "B_c", "sram_bytes"]
COUNTED = ["bytes_model", "bytes_instrumented", "bytes_read", "bytes_written", "o_write_bytes"]


def compare(run: Path, ref: Path) -> list[dict]:
    a, b = (runs.table(f, contract.CPU_BYTES, KEYS + COUNTED + ["bytes_profiler"]) for f in (run, ref))
    return per_direction(NAME, contract.CPU_BYTES, a, b, judge)


def judge(a, b, direction: str) -> list[dict]:
    """One pass's rows: its counts identical, its profiler bytes within PROFILER_TOLERANCE."""
    prefix, keys, counted = label_direction(direction), KEYS, COUNTED
    if direction != contract.FORWARD:
        keys = keys + ["dq_accumulation"]
        counted = counted + [c for c in ("grad_write_bytes",) if c in a.columns and c in b.columns]
    rows = exact(NAME, a, b, keys, counted, contract.CPU_BYTES, prefix)
    joined = a.merge(b, on=keys, suffixes=("_run", "_ref"))
    # a row the profiler does not measure (the tiled schemes) has no bytes in either run; one that
    # has them in one run only was measured there alone (N above the other's cpu.profiler_max_n):
    # named, not comparable
    held = joined[["bytes_profiler_run", "bytes_profiler_ref"]].notna()
    for _, r in joined[held.any(axis=1)].iterrows():
        label = f"{prefix}scheme={r['scheme']}, N={r['N']}, d={r['d']}, dtype={r['dtype']}"
        x, y = r["bytes_profiler_run"], r["bytes_profiler_ref"]
        if pd.isna(x) or pd.isna(y):
            rows.append(row(PROFILER, label, "bytes_profiler", x, y, verdict=NOT_COMPARABLE,
                            reason=f"measured in the {'reference' if pd.isna(x) else 'run'} only "
                                   "(its cpu.profiler_max_n is larger)"))
            continue
        diff = relative(x, y)
        rows.append(row(PROFILER, label, "bytes_profiler", x, y, diff, PROFILER_TOLERANCE,
                        AGREE if diff <= PROFILER_TOLERANCE else DISAGREE))
    return rows
