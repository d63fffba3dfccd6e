"""GPU bytes (`gpu/bytes/`): on the same GPU model, each point's DRAM reads and the bytes stored
into the L2 within GPU_BYTES_TOLERANCE (writes to DRAM depend on what the L2 still holds when a
kernel ends: not compared), per pass (`direction`: a table without the column is all forward); on
another GPU, or without one, not comparable."""

from __future__ import annotations

from pathlib import Path

from minimodel.floor import contract
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
    status_differs,
    unique,
    words,
)

NAME = "gpu bytes"
READS = (contract.GPU_BYTES, contract.GPU_BYTES_SUMMARY)
# Same GPU model: naive's reads follow the model within 0.1 %, flash's depend on which programs
# share the L2 at a time, which the scheduler decides.
GPU_BYTES_TOLERANCE = 0.05
GPU_BYTES_METRICS = ("dram_read_bytes", "l2_write_bytes")
TOLERANCES = {NAME: GPU_BYTES_TOLERANCE}


def compare(run: Path, ref: Path) -> list[dict]:
    mismatch = device_mismatch(NAME, run, ref, contract.GPU_BYTES_SUMMARY, measured_key="measured",
                               unmeasured="measured no GPU bytes",
                               different="different GPU models: caches and bytes differ")
    if mismatch:
        return mismatch
    point = ["regime", "B", "H", "N", "d", "causal", "impl"]
    a, b = (runs.table(folder, contract.GPU_BYTES, point + ["status", *GPU_BYTES_METRICS])
            for folder in (run, ref))
    if a is None or b is None:
        return missing(NAME, contract.GPU_BYTES, a)
    return per_direction(NAME, contract.GPU_BYTES, a, b,
                         lambda a, b, direction: judge(a, b, direction, point))


def judge(a, b, direction: str, point: list[str]) -> list[dict]:
    """One pass's points: where both runs measured, DRAM reads and L2 stores within
    GPU_BYTES_TOLERANCE; else their statuses, the same one on both sides agreeing (a point neither
    measured for the same reason), a changed one disagreeing ("status differs", both named)."""
    unique({"run": a, "reference": b}, point, contract.GPU_BYTES)
    a, b = (t.assign(status=words(t["status"])).set_index(point) for t in (a, b))
    rows = only_in(NAME, set(a.index), set(b.index), prefix=label_direction(direction))
    for key in a.index.intersection(b.index):
        label = (f"{label_direction(direction)}{key[0]} (1, {key[2]}, {key[3]}, {key[4]}) "
                 f"{'causal' if key[5] else 'full'} {key[6]}")
        said = (a.loc[key, "status"], b.loc[key, "status"])
        if contract.MEASURED not in said or said[0] != said[1]:
            same = said[0] == said[1]
            rows.append(row(NAME, label, "status", *said, verdict=AGREE if same else DISAGREE,
                            reason="" if same else status_differs(*said)))
            continue
        for metric in GPU_BYTES_METRICS:
            x, y = float(a.loc[key, metric]), float(b.loc[key, metric])
            diff = relative(x, y)
            rows.append(row(NAME, label, metric, x, y, diff, GPU_BYTES_TOLERANCE,
                            AGREE if diff <= GPU_BYTES_TOLERANCE else DISAGREE))
    return rows
