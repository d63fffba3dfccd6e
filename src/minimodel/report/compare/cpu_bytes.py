"""CPU bytes (`cpu/bytes.csv`): the instrumented counts and the model do not depend on the
machine: identical. torch.profiler's allocated bytes ("cpu profiler") within PROFILER_TOLERANCE."""

from __future__ import annotations

from pathlib import Path

from minimodel import contract
from minimodel.report import runs
from minimodel.report.compare.rows import AGREE, DISAGREE, exact, relative, row

NAME = "cpu bytes"
PROFILER = "cpu profiler"  # the part of the profiler's rows
READS = (contract.CPU_BYTES,)
PROFILER_TOLERANCE = 0.05
TOLERANCES = {PROFILER: PROFILER_TOLERANCE}


def compare(run: Path, ref: Path) -> list[dict]:
    keys = ["scheme", "N", "d", "dtype", "B_r", "B_c", "sram_bytes"]
    counted = ["bytes_model", "bytes_instrumented", "bytes_read", "bytes_written", "o_write_bytes"]
    a, b = (runs.table(f, contract.CPU_BYTES, keys + counted + ["bytes_profiler"]) for f in (run, ref))
    a, b = (None if t is None else contract.forward_rows(t) for t in (a, b))  # the forward's rows
    rows = exact(NAME, a, b, keys, counted, contract.CPU_BYTES)
    if a is None or b is None:
        return rows
    joined = a.merge(b, on=keys, suffixes=("_run", "_ref"))
    for _, r in joined.dropna(subset=["bytes_profiler_run", "bytes_profiler_ref"]).iterrows():
        diff = relative(r["bytes_profiler_run"], r["bytes_profiler_ref"])
        ok = diff <= PROFILER_TOLERANCE
        rows.append(row(PROFILER, f"scheme={r['scheme']}, N={r['N']}, d={r['d']}, dtype={r['dtype']}",
                        "bytes_profiler", r["bytes_profiler_run"], r["bytes_profiler_ref"], diff,
                        PROFILER_TOLERANCE, AGREE if ok else DISAGREE))
    return rows
