"""A run's timing ratios: at each point and pass, another implementation's time over the kernel's
(kernel/<contender>), and what each side said where it gave no time.

A ratio is a number only when both of its rows are `ok` with a positive, finite `ms`; otherwise it
is its status ("naive: out of memory", "kernel: skipped: ..."), compared as words, never as a
number (a NaN ratio judged as a number is never equal to itself).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from minimodel.floor import contract
from minimodel.report.compare.rows import words

KEY = list(contract.TIMING_KEY)  # a timing row's key, and its samples' (contract.TIMING_SAMPLES)
POINT = [c for c in KEY if c != "impl"]  # a point of one pass
RATIO = [*POINT, "metric"]  # a ratio's key
FAMILY = ["direction", "grid", "d", "metric"]  # the points a family's geometric mean is taken over
# The kernel's speed against another implementation (their time over the kernel's), by metric name;
# every contender timed beside them is kernel/<its name>.
RATIOS = dict(zip(("kernel/cudnn", "kernel/fa2", "kernel/naive"),
                  (contract.SDPA_CUDNN, contract.SDPA_FLASH, contract.NAIVE), strict=True))
NO_TIME = "ok, but without a positive ms"  # a row that says ok and gives no usable time: damaged
NO_STATUS = "no status"  # a row whose status is empty: damaged too
DAMAGED = (NO_TIME, NO_STATUS)
BOOLEANS = {"true": True, "false": False, "1": True, "0": False, "1.0": True, "0.0": False}  # causal


def names(impls) -> dict[str, str]:
    """metric name -> implementation, for the implementations a table holds."""
    held = set(impls)
    contenders = {f"kernel/{i}": i for i in sorted(held) if i not in contract.IMPLEMENTATIONS}
    return {m: i for m, i in (RATIOS | contenders).items() if i in held}


def keyed(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with its key columns in one type each (a CSV's True/False and 1/0 alike, words as
    Python strings under pandas 2 and 3 alike), its rows whose key is not a point (a number missing,
    causal neither true nor false, a name empty) left out."""
    frame = contract.with_direction(frame)
    for column in ("B", "H", "N", "d"):
        if not pd.api.types.is_integer_dtype(frame[column]):
            frame[column] = pd.to_numeric(frame[column], errors="coerce")
    if not pd.api.types.is_bool_dtype(frame["causal"]):
        frame["causal"] = frame["causal"].astype(str).str.strip().str.lower().map(BOOLEANS)
    for column in ("direction", "grid", "impl"):
        # an empty cell (NaN: a key groupby drops it under pandas 3) is a key that names no point
        frame[column] = words(frame[column])
    bad = frame[["B", "H", "N", "d", "causal"]].isna().any(axis=1)
    bad |= frame[["direction", "grid", "impl"]].eq("").any(axis=1)
    if bad.any():
        frame = frame[~bad].copy()
    for column in ("B", "H", "N", "d"):
        if not pd.api.types.is_integer_dtype(frame[column]):
            frame[column] = frame[column].astype(np.int64)
    frame["causal"] = frame["causal"].astype(bool)
    return frame


def statuses(column: pd.Series) -> pd.Series:
    """A timing table's `status` column as Python strings, an empty one `NO_STATUS` (pandas 3 keeps
    an empty cell NaN through astype(str), pandas 2 spells it "nan": neither is a status)."""
    said = words(column)
    return said.where(said != "", NO_STATUS)


def side(timing: pd.DataFrame) -> pd.DataFrame:
    """One run's ratios (`RATIO` columns, `impl`, `status`, `ratio`): `status` is contract.OK when
    both implementations gave a time (then `ratio` is their quotient), else what each one that did
    not said; NaN `ratio` then."""
    timing = keyed(timing)
    ms = pd.to_numeric(timing["ms"], errors="coerce")
    status = statuses(timing["status"])
    ok = status == contract.OK
    timing["said"] = status.where(~ok | (np.isfinite(ms) & (ms > 0)), NO_TIME)
    timing["ms"] = ms.where(timing["said"] == contract.OK)
    kernel = timing[timing["impl"] == contract.TRITON][[*POINT, "said", "ms"]]
    metric = {i: m for m, i in names(timing["impl"]).items()}
    others = timing[timing["impl"].isin(metric)][[*POINT, "impl", "said", "ms"]]
    both = others.merge(kernel, on=POINT, suffixes=("", "_kernel"))
    both["metric"] = both["impl"].map(metric)
    fine = (both["said"] == contract.OK) & (both["said_kernel"] == contract.OK)
    both["ratio"] = (both["ms"] / both["ms_kernel"]).where(fine)
    kernel_said = np.where(both["said_kernel"] == contract.OK, "", "kernel: " + both["said_kernel"])
    impl_said = np.where(both["said"] == contract.OK, "", both["impl"] + ": " + both["said"])
    both["status"] = [contract.OK if f else f"{a}; {b}" if a and b else a or b
                      for f, a, b in zip(fine, kernel_said, impl_said, strict=True)]
    return both[[*RATIO, "impl", "status", "ratio"]].reset_index(drop=True)


def change(run, ref):
    """The change of a ratio between two runs, either way: max/min - 1 (0.10: one is 10 % above)."""
    return np.expm1(np.abs(np.log(np.asarray(run, dtype=float) / np.asarray(ref, dtype=float))))


def log_changes(run: pd.DataFrame, ref: pd.DataFrame) -> pd.DataFrame:
    """The ratios that are numbers in both of two runs' `side` tables, with `lc`: ln(run / ref)."""
    both = run.merge(ref, on=RATIO, suffixes=("_run", "_ref"))
    both = both[both["ratio_run"].notna() & both["ratio_ref"].notna()].copy()
    both["lc"] = np.log(both["ratio_run"] / both["ratio_ref"])
    return both.reset_index(drop=True)
