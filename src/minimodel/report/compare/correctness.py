"""correctness (`gpu/correctness/`): every case's verdict equal, the errors side by side, per pass
(`direction`: a table without the column is all forward); a run under the interpreter and one on
CUDA check different grids: not comparable."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from minimodel.floor import contract
from minimodel.report import runs
from minimodel.report.compare import ratios
from minimodel.report.compare.rows import (
    AGREE,
    DISAGREE,
    NOT_COMPARABLE,
    label_direction,
    only_in,
    per_direction,
    row,
    unique,
)

NAME = "correctness"
READS = (contract.CORRECTNESS,)
TOLERANCES: dict[str, float] = {}  # a verdict, equal or not


# What names one case: its shape, K/V heads (grouped-query cases share N and d with others) and
# layout; a table from before the grouped-query cases or the layouts has one value of each.
KEYS = ["impl", "B", "H", "H_kv", "N", "d", "causal", "dtype", "layout"]
DEFAULTS = {"H_kv": lambda frame: frame["H"], "layout": lambda frame: "contiguous"}


def compare(run: Path, ref: Path) -> list[dict]:
    keys = KEYS
    columns = [k for k in keys if k not in DEFAULTS] + ["backend", "skipped", "reason", "passed",
                                                          "err_kernel_vs_fp64"]
    a, b = (runs.table(folder, contract.CORRECTNESS, columns) for folder in (run, ref))
    if a is None or b is None:
        return [row(NAME, contract.CORRECTNESS, "table", None, None,
                    verdict=NOT_COMPARABLE, reason="missing in one run")]
    for frame in (a, b):
        for column, default in DEFAULTS.items():
            if column not in frame:
                frame[column] = default(frame)
    backends = (sorted(set(a["backend"])), sorted(set(b["backend"])))
    if backends[0] != backends[1]:
        return [row(NAME, "every case", "backend", ", ".join(backends[0]), ", ".join(backends[1]),
                    verdict=NOT_COMPARABLE, reason="one ran under Triton's interpreter, the other on "
                    "CUDA: different grids and arithmetic")]
    return per_direction(NAME, contract.CORRECTNESS, a, b,
                         lambda a, b, direction: judge(a, b, direction, keys))


def judge(a, b, direction: str, keys: list[str]) -> list[dict]:
    """One pass's cases: each verdict (or skip) equal in both runs."""
    unique({"run": a, "reference": b}, keys, contract.CORRECTNESS)
    rows = only_in(NAME, set(map(tuple, a[keys].values)), set(map(tuple, b[keys].values)),
                   prefix=label_direction(direction))
    for _, r in a.merge(b, on=keys, suffixes=("_run", "_ref")).iterrows():
        label = label_direction(direction) + ", ".join(f"{k}={r[k]}" for k in keys)
        skipped = verdict(r["skipped_run"]), verdict(r["skipped_ref"])
        if True in skipped or None in skipped:
            same = skipped[0] == skipped[1] and None not in skipped
            reason = "" if same else unreadable(skipped, column="skipped") or "skipped in one run only"
            rows.append(row(NAME, label, metric="skipped", run=r["reason_run"], reference=r["reason_ref"],
                            verdict=AGREE if same else DISAGREE, reason=reason))
            continue
        passed = verdict(r["passed_run"]), verdict(r["passed_ref"])
        same = passed[0] == passed[1] and None not in passed
        reason = "" if same else unreadable(passed, column="passed") or "verdict differs"
        rows.append(row(NAME, label, "passed (err_kernel_vs_fp64 beside)",
                        f"{passed[0]} ({r['err_kernel_vs_fp64_run']:.2e})",
                        f"{passed[1]} ({r['err_kernel_vs_fp64_ref']:.2e})",
                        verdict=AGREE if same else DISAGREE, reason=reason))
    return rows


def unreadable(values: tuple, column: str) -> str:
    """The reason naming the sides whose `column` is neither true nor false, or ""."""
    sides = [side for side, v in zip(("run", "reference"), values, strict=True) if v is None]
    return f"no {column} value (true or false) in the {' and the '.join(sides)}" if sides else ""


def verdict(value) -> bool | None:
    """A case's `passed` as a CSV gives it (True, "true", 1 ...), None when it is neither true nor
    false (an empty cell: bool(NaN) would say it passed)."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    return ratios.BOOLEANS.get(str(value).strip().lower())
