"""timing (`gpu/timing/`): on the same GPU model, the ratios that should travel (the kernel against
SDPA's cuDNN and FlashAttention-2 backends, against naive PyTorch, and against each contender), per
pass (`direction`; a table without the column is all forward); on another GPU, or without one, not
comparable.

A ratio that is a number in both runs disagrees only when its change is beyond its band
(`bands.POINT_BANDS`, by grid, the lab grid's N and the pass; `bands.RATIO_BANDS` for the ratios
that move more than their group) AND, where both runs hold at least 10
samples of it, significant given them (`stats`: Welch's t-test on the log samples, Holm over the
run). A ratio without samples in either run (an older run), with fewer
than 10, or with damaged samples, is judged by the wider max(band, 10 %). Each row's `rule` says
which. A ratio that is not a number on a side is its status: the same status on both sides (out of
memory, the same skip) agrees, a status that changes disagrees ("status differs", both named).
Before the points, each family's geometric mean (`families`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from minimodel.floor import contract
from minimodel.report import runs
from minimodel.report.compare import bands, families, ratios, samples, stats
from minimodel.report.compare.rows import (
    AGREE,
    DISAGREE,
    NOT_COMPARABLE,
    device_mismatch,
    label_direction,
    missing,
    only_in,
    per_direction,
    row,
    status_differs,
    unique,
)

NAME = "timing"
READS = (contract.TIMING, contract.TIMING_SUMMARY, contract.TIMING_SAMPLES)
RATIOS = ratios.RATIOS
TOLERANCES = ({f"timing {grid}, {direction}": band for (grid, direction), band in bands.POINT_BANDS.items()}
              | {f"timing {grid}, {direction}, {metric}": band
                 for (grid, direction, metric), band in bands.RATIO_BANDS.items()}
              | {"timing family": bands.FAMILY_BAND, "timing without samples, at least": bands.OLDER_FLOOR})
BY_SAMPLES, BY_STATUS, WIDER = bands.BY_SAMPLES, bands.BY_STATUS, bands.WIDER
# what is read of timing.csv: `direction` and `samples` where there (a run before the backward, or
# before the samples, lacks them)
COLUMNS = [*(c for c in ratios.KEY if c != "direction"), "ms", "status"]


def timing_band(grid: str, n: int, direction: str = contract.FORWARD, metric: str | None = None) -> float:
    """The band of a ratio (`metric`, as "kernel/flex"; None: its group's) at a point of `grid` with
    sequence length `n`, in `direction`."""
    return float(bands.point_band(grid, n, direction, None if metric is None else [metric])[0])


def compare(run: Path, ref: Path) -> list[dict]:
    mismatch = device_mismatch(NAME, run, ref, contract.TIMING_SUMMARY, "device", "had no GPU timing",
                               "different GPU models: speed ratios do not travel between them")
    if mismatch:
        return mismatch
    a, b = (runs.table(folder, contract.TIMING, COLUMNS) for folder in (run, ref))
    if a is None or b is None:
        return missing(NAME, contract.TIMING, a)
    return judge(a, b, samples.load(run, a, "run"), samples.load(ref, b, "reference"))


def judge(a: pd.DataFrame, b: pd.DataFrame, run_samples: samples.Samples,
          ref_samples: samples.Samples) -> list[dict]:
    """The rows of two runs' timing tables: families, the samples' problems, then per pass the
    points only one run has, the statuses, and the ratios."""
    keyed = {"run": ratios.keyed(a), "reference": ratios.keyed(b)}
    for (side, frame), raw in zip(keyed.items(), (a, b), strict=True):
        if len(frame) < len(raw):
            raise runs.RunError(f"{contract.TIMING} of the {side}: {len(raw) - len(frame)} rows whose key is "
                                "not a point (B, H, N, d whole numbers, causal True or False, direction, "
                                "grid and impl not empty)")
    # the key as the ratios read it: rows whose causal is spelled 1 and True are one point
    unique(keyed, ratios.KEY, contract.TIMING)
    numbers = []
    ra, rb = ratios.side(a), ratios.side(b)
    rows = per_direction(NAME, contract.TIMING, a, b, lambda x, y, direction: statuses(
        x, y, ra[ra["direction"] == direction], rb[rb["direction"] == direction], direction, numbers))
    pairs = (pd.concat(numbers, ignore_index=True) if numbers
             else pd.DataFrame(columns=[*ratios.RATIO, "impl", "ratio_run", "ratio_ref"]))
    pairs = with_rules(pairs, run_samples, ref_samples)
    problems = [row(NAME, contract.TIMING_SAMPLES, "samples", None, None, verdict=NOT_COMPARABLE,
                    reason=s.line) for s in (run_samples, ref_samples) if s.line]
    return families.judge(pairs) + problems + rows + points(pairs)


def statuses(a: pd.DataFrame, b: pd.DataFrame, ra: pd.DataFrame, rb: pd.DataFrame, direction: str,
             numbers: list) -> list[dict]:
    """One pass (its timing rows `a`, `b`, and their ratios `ra`, `rb`): the rows of the ratios
    that are not numbers in both runs, and of the points one run lacks; the ratios that are numbers
    in both are appended to `numbers`."""
    unique({"run": a, "reference": b}, ratios.KEY, contract.TIMING)
    keys = [set(r[ratios.RATIO].itertuples(index=False, name=None)) for r in (ra, rb)]
    prefix = label_direction(direction)
    rows = only_in(NAME, *keys, "a grid point or contender the other lacks, or a point not timed there",
                   prefix=prefix)
    both = ra.merge(rb, on=[*ratios.RATIO, "impl"], suffixes=("_run", "_ref"))
    fine = (both["status_run"] == contract.OK) & (both["status_ref"] == contract.OK)
    numbers.append(both[fine][[*ratios.RATIO, "impl", "ratio_run", "ratio_ref"]])
    for r in both[~fine].to_dict("records"):
        said = (r["status_run"], r["status_ref"])
        damaged = [(side, why) for side, s in zip(("run", "reference"), said, strict=True)
                   for why in ratios.DAMAGED if why in s]
        if damaged:
            verdict, reason = NOT_COMPARABLE, "; ".join(f"{contract.TIMING} of the {side}: {why}"
                                                        for side, why in damaged)
        elif said[0] == said[1]:
            verdict, reason = AGREE, ""
        else:
            verdict, reason = DISAGREE, status_differs(*said)
        rows.append(row(NAME, label(r), metric(r), said[0], said[1], verdict=verdict, reason=reason,
                        rule=BY_STATUS))
    return rows


def label(r: dict) -> str:
    return (f"{label_direction(r['direction'])}{r['grid']} ({r['B']}, {r['H']}, {r['N']}, {r['d']}) "
            f"{'causal' if r['causal'] else 'full'}")


def metric(r: dict) -> str:
    return r["metric"] if r["direction"] == contract.FORWARD else f"{r['metric']} ({r['direction']})"


def with_rules(pairs: pd.DataFrame, run_samples: samples.Samples, ref_samples: samples.Samples):
    """The ratios that are numbers in both runs, with their band, the rule that judges them, the
    tolerance it applies and their log samples (`logs_run`, `logs_ref`; None under the wider rule)."""
    pairs = pairs.reset_index(drop=True)
    pairs["band"] = (bands.point_band(pairs["grid"], pairs["N"], pairs["direction"], pairs["metric"])
                     if len(pairs) else [])
    rules, logs = [], {"run": [], "ref": []}
    at = pairs[ratios.POINT].itertuples(index=False, name=None)
    for point, impl in zip(at, pairs["impl"], strict=True):
        (why_a, la), (why_b, lb) = run_samples.rule(point, impl), ref_samples.rule(point, impl)
        why = (f"{why_a} in the run" if why_a else "") or (f"{why_b} in the reference" if why_b else "")
        rules.append(WIDER + why if why else BY_SAMPLES)
        logs["run"].append(None if why else la)
        logs["ref"].append(None if why else lb)
    pairs["rule"], pairs["logs_run"], pairs["logs_ref"] = rules, logs["run"], logs["ref"]
    sampled = pairs["rule"] == BY_SAMPLES
    pairs["tolerance"] = np.where(sampled, pairs["band"], bands.wider(pairs["band"].to_numpy(dtype=float)))
    return pairs


def decide(pairs: pd.DataFrame) -> pd.DataFrame:
    """`with_rules`' table with each ratio's `change`, Holm-adjusted `p` (NaN where its rule does not
    test), `verdict` and `reason`: beyond its tolerance and, where tested, significant."""
    pairs = pairs.copy()
    pairs["change"] = ratios.change(pairs["ratio_run"], pairs["ratio_ref"])
    beyond = bands.beyond(pairs["change"], pairs["tolerance"])
    sampled = (pairs["rule"] == BY_SAMPLES).to_numpy()
    p = np.full(len(pairs), np.nan)
    p[sampled] = stats.holm(stats.significance(list(pairs.loc[sampled, "logs_run"]),
                                               list(pairs.loc[sampled, "logs_ref"])))
    pairs["p"] = p
    said = [verdict_of(b, q) for b, q in zip(beyond, p, strict=True)]
    pairs["verdict"] = [v for v, _ in said]
    # a grid or pass no committed run has: its band is the widest of those derived, and says so
    derived = bands.derived(pairs["grid"], pairs["N"], pairs["direction"]) if len(pairs) else []
    pairs["reason"] = ["; ".join(filter(None, (r, "" if known else unbanded(grid, direction))))
                       for (_, r), known, grid, direction
                       in zip(said, derived, pairs["grid"], pairs["direction"], strict=True)]
    return pairs


def unbanded(grid: str, direction: str) -> str:
    return f"no band derived for {grid}, {direction}: the widest, {bands.WIDEST:.1%}"


def points(pairs: pd.DataFrame) -> list[dict]:
    """Each ratio that is a number in both runs, judged by its rule; Holm over the run's tested ones."""
    if not len(pairs):
        return []
    pairs = decide(pairs)
    order = {d: i for i, d in enumerate(contract.DIRECTIONS)}
    pairs = pairs.sort_values("direction", key=lambda d: d.map(order).fillna(len(order)), kind="stable")
    return [row(NAME, label(r), metric(r), r["ratio_run"], r["ratio_ref"], r["change"], r["tolerance"],
                r["verdict"], r["reason"], rule=r["rule"]) for r in pairs.to_dict("records")]


def verdict_of(beyond: bool, p: float) -> tuple[str, str]:
    """(verdict, reason) of a change beyond its band or not, and its Holm-adjusted p (NaN: untested)."""
    if not beyond:
        return AGREE, ""
    if np.isnan(p):
        return DISAGREE, "beyond its band"
    if p <= stats.ALPHA:
        return DISAGREE, f"beyond its band and significant (Holm-adjusted p = {p:.1e})"
    return AGREE, f"beyond its band, within noise (Holm-adjusted p = {p:.2f})"
