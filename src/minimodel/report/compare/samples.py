"""A run's timing samples (contract.TIMING_SAMPLES), checked against its timing table, and the
samples of each ratio.

timing.csv's `samples` is each row's k; samples.csv holds the row's key, `sample` (the round,
0 ... k-1) and `ms`. A run made before the samples has neither (`Samples.held` False): all its
ratios are judged by the wider rule. A row whose samples are missing or damaged (a NaN or
non-positive ms, a count other than its k, rounds other than 0 ... k-1, a timing.csv ms that is
not their median: the point's change is read from that ms and its test from the samples, so the
two must be of one run) is named in one line, and the ratios it is part of are judged by the wider
rule; so are rows of samples.csv that belong to no timed row (unknown keys), named in the same
line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from minimodel.floor import contract
from minimodel.report import runs
from minimodel.report.compare import ratios
from minimodel.report.compare.bands import MIN_SAMPLES

COLUMNS = list(contract.TIMING_SAMPLES_COLUMNS)
NAMED = 3  # rows named in the line, before "and N more"
# Why a ratio is judged by the wider rule, by what its samples lack (`Samples.rule`).
NONE, FEW, DAMAGED = "no samples", f"fewer than {MIN_SAMPLES} samples", "damaged samples"
# a round times every implementation of a point once: two counts that differ are not of one set of rounds
UNEQUAL = "unequal sample counts (the kernel's and the other's)"
# timing.csv's ms against the median of its samples: both written from the same floats (the stage's
# `statistics.median`, this module's pandas median: the last bit may differ), so any other difference
# is two runs' files side by side
MEDIAN_RTOL = 1e-9


@dataclass
class Samples:
    """One run's samples: each timed row's, in round order, by key (`ratios.KEY` tuple)."""
    held: bool  # the run records samples (timing.csv has the column)
    by_key: dict = field(default_factory=dict)
    damaged: dict = field(default_factory=dict)  # key -> why
    line: str | None = None  # the one line naming the damaged rows, None when none

    def rule(self, point: tuple, impl: str) -> tuple[str, np.ndarray | None]:
        """(why the wider rule judges the ratio of `impl` at `point`, or "" when its samples
        decide; the log ratio samples, paired by round, when there are)."""
        if not self.held:
            return NONE, None
        keys = (*point, contract.TRITON), (*point, impl)
        if any(k in self.damaged or k not in self.by_key for k in keys):
            return DAMAGED, None
        kernel, other = (self.by_key[k] for k in keys)
        if len(kernel) != len(other):
            return UNEQUAL, None
        return ("" if len(kernel) >= MIN_SAMPLES else FEW), np.log(other / kernel)


def label(key: tuple) -> str:
    direction, grid, b, h, n, d, causal, impl = key
    return f"{direction} {grid} ({b}, {h}, {n}, {d}) {'causal' if causal else 'full'} {impl}"


def load(folder: Path, timing: pd.DataFrame, side: str) -> Samples:
    """The run's samples, checked against its timing table (read by the caller); samples.csv is
    read whether or not the table gives counts, so that a run never has samples no one looks at."""
    try:
        frame = runs.table(folder, contract.TIMING_SAMPLES, COLUMNS)
    except runs.RunError as err:  # not a table, or one without the columns: every row's are damaged
        return of(timing, None, side, problem=str(err))
    return of(timing, frame, side)


def of(timing: pd.DataFrame, frame: pd.DataFrame | None, side: str, problem: str = "") -> Samples:
    """A run's samples from its timing table and its samples table (None: the run has none;
    `problem`: why the table could not be read)."""
    timed = ratios.keyed(timing)
    if "samples" not in timed.columns:
        return Samples(held=False)
    timed = timed[timed["status"].astype(str) == contract.OK]
    counts = pd.to_numeric(timed["samples"], errors="coerce")
    medians = pd.to_numeric(timed["ms"], errors="coerce")
    keys = list(timed[ratios.KEY].itertuples(index=False, name=None))
    name = f"{contract.TIMING_SAMPLES} of the {side}"
    if problem:
        return everything_damaged(keys, f"{name}: {problem}; every row is judged by the wider band")
    if frame is None:
        if counts.isna().all():  # a run that timed nothing claims no samples
            return Samples(held=False)
        return everything_damaged(keys, f"{name}: missing, though timing.csv gives samples for "
                                        f"{int(counts.notna().sum())} rows; every row is judged by the "
                                        "wider band")
    return check(frame, dict(zip(keys, zip(counts, medians, strict=True), strict=True)), name)


def everything_damaged(keys: list[tuple], line: str) -> Samples:
    return Samples(held=True, damaged={k: line for k in keys}, line=line)


def check(frame: pd.DataFrame, expected: dict, name: str) -> Samples:
    """The samples of every key in `expected` (key -> timing.csv's (k, ms)), each checked."""
    read = len(frame)
    frame = ratios.keyed(frame)
    unparsed = read - len(frame)  # a key column that is not a number, or causal not a boolean
    frame["sample"] = pd.to_numeric(frame["sample"], errors="coerce")
    frame["ms"] = pd.to_numeric(frame["ms"], errors="coerce")
    frame = frame.sort_values([*ratios.KEY, "sample"], kind="stable")
    # keyed left no NaN in a key; dropna=False all the same, so that no row can leave a group
    grouped = frame.groupby(ratios.KEY, sort=False, dropna=False)
    frame["off_round"] = frame["sample"].to_numpy() != grouped.cumcount().to_numpy()
    frame["bad_ms"] = ~(np.isfinite(frame["ms"]) & (frame["ms"] > 0))
    held = grouped.agg(n=("ms", "size"), off_round=("off_round", "any"), bad_ms=("bad_ms", "any"),
                       median=("ms", "median"))
    ms, at = frame["ms"].to_numpy(dtype=float), grouped.indices
    # each key's own rows, by position (in round order: the frame is sorted), never cut by counts
    found = {key: (*values, ms[at[key]]) for key, *values in held.itertuples(name=None)}
    out = Samples(held=True)
    for key, (k, ms) in expected.items():
        got = found.pop(key, None)
        why = problem(got, k, ms)
        if why:
            out.damaged[key] = why
        else:
            out.by_key[key] = got[-1]
    unknown = sum(got[0] for got in found.values()) + unparsed
    said = [f"{label(k)}: {why}" for k, why in out.damaged.items()][:NAMED]
    if len(out.damaged) > NAMED:
        said.append(f"and {len(out.damaged) - NAMED} more")
    if unknown:
        said.append(f"{unknown} sample rows of no timed row (unknown keys)")
    if said:
        out.line = (f"{name}: {len(out.damaged)} rows' samples missing or damaged ({'; '.join(said)}); "
                    "those rows are judged by the wider band")
    return out


def problem(got: tuple | None, k, ms: float) -> str:
    """Why a row's samples (count, rounds out of order, a bad ms, their median, the values) cannot be
    used beside its timing.csv `ms`, or "" when they can."""
    if pd.isna(k) or k < 1 or k != int(k):
        return f"timing.csv gives no count of samples ({k})"
    if got is None:
        return "no samples"
    n, off_round, bad_ms, median, _ = got
    if n != k:
        return f"{n} samples where timing.csv says {int(k)}"
    if off_round:
        return f"rounds other than 0 ... {int(k) - 1}"
    if bad_ms:
        return "a NaN or non-positive ms"
    if not np.isclose(ms, median, rtol=MEDIAN_RTOL, atol=0.0):
        return f"timing.csv's ms {ms:.6g} is not the median of its samples ({median:.6g})"
    return ""
