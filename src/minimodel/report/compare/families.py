"""The timing ratios' families: per pass, grid, head dim d and ratio name, the geometric mean over
the points that are numbers in both runs (two or more), beside the reference's.

A family moves less than its points (a mean of several), so its band is tighter
(`bands.FAMILY_BAND`). It disagrees when its change is beyond that band and, where every point of
it has samples in both runs, significant: its samples are the rounds' geometric means over its
points (the rounds both runs share), tested as a point's are (`stats.significance`, Holm over the
run's families). A family with a point judged by the wider rule is judged by max(its band, 10 %). Its
interval (`stats.CONFIDENCE`) is shown where its samples are.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from minimodel.floor import contract
from minimodel.report.compare import bands, ratios, stats
from minimodel.report.compare.rows import AGREE, DISAGREE, row

NAME = "timing families"
GRIDS = {contract.FLASHATTENTION_GRID: "FlashAttention's grid", contract.LAB_GRID: "the lab grid"}


def judge(pairs: pd.DataFrame) -> list[dict]:
    """A row per family of the ratios that are numbers in both runs (`timing.with_rules`' table)."""
    return [family_row(r) for r in decide(pairs).to_dict("records")]


def decide(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per family (`ratios.FAMILY`) of two points or more: its geometric means `run` and `ref`, their
    `change`, its samples per run (`logs_run`, `logs_ref`; None where a point has none), the
    `tolerance` of its rule, Holm-adjusted `p` and `verdict`."""
    if not len(pairs):
        return pd.DataFrame(columns=[*ratios.FAMILY, "verdict"])
    pairs = pairs.assign(log_run=np.log(pairs["ratio_run"].astype(float)),
                         log_ref=np.log(pairs["ratio_ref"].astype(float)),
                         sampled=pairs["logs_run"].notna() & pairs["logs_ref"].notna())
    grouped = pairs.groupby(ratios.FAMILY, sort=False)
    table = grouped.agg(points=("log_run", "size"), log_run=("log_run", "mean"), log_ref=("log_ref", "mean"),
                        sampled=("sampled", "all")).reset_index()
    # each family's rows, in the order of the table's: `grouped.indices` itself is in the order of
    # the keys' codes, not of the table's rows, for a key of several columns
    members = [grouped.indices[key] for key in table[ratios.FAMILY].itertuples(index=False, name=None)]
    for side in ("logs_run", "logs_ref"):
        logs = pairs[side].to_numpy()
        table[side] = [rounds(logs[at]) if ok else None
                       for at, ok in zip(members, table["sampled"], strict=True)]
    table = table[table["points"] >= 2].reset_index(drop=True)
    table["run"], table["ref"] = np.exp(table["log_run"]), np.exp(table["log_ref"])
    table["change"] = np.expm1(np.abs(table["log_run"] - table["log_ref"]))
    sampled = table["sampled"].to_numpy(dtype=bool)
    table["tolerance"] = np.where(sampled, bands.FAMILY_BAND, bands.wider(bands.FAMILY_BAND))
    p = np.full(len(table), np.nan)
    p[sampled] = stats.holm(stats.significance(list(table.loc[sampled, "logs_run"]),
                                               list(table.loc[sampled, "logs_ref"])))
    table["p"] = p
    beyond = bands.beyond(table["change"], table["tolerance"])
    table["beyond"] = beyond
    table["verdict"] = np.where(beyond & (np.isnan(p) | (p <= stats.ALPHA)), DISAGREE, AGREE)
    return table


def rounds(logs) -> np.ndarray:
    """A family's samples in one run: per round all its points have, their mean log ratio."""
    k = min(len(x) for x in logs)
    return np.mean([x[:k] for x in logs], axis=0)


def shown(value: float, logs) -> str:
    if logs is None:
        return f"{value:.3f}"
    low, high = stats.interval(logs, value)
    return f"{value:.3f} [{low:.3f}, {high:.3f}]"


def family_row(r: dict) -> dict:
    item = f"{r['direction']}, {GRIDS.get(r['grid'], r['grid'])}, d = {r['d']}"
    said = f"{shown(r['run'], r['logs_run'])} against {shown(r['ref'], r['logs_ref'])}, {r['points']} points"
    if r["beyond"]:
        tested = "" if np.isnan(r["p"]) else f" (Holm-adjusted p = {r['p']:.1e})"
        said += ("; beyond its band" + (" and significant" if tested else "") if r["verdict"] == DISAGREE
                 else "; beyond its band, within noise") + tested
    rule = bands.BY_SAMPLES if r["sampled"] else bands.WIDER + "a point of it judged by the wider band"
    return row(NAME, item, r["metric"], r["run"], r["ref"], r["change"], r["tolerance"], r["verdict"],
               said, rule=rule)


def line(r: dict) -> str:
    """A family's row as verdict.json and the console say it: "kernel/fa4, forward, FlashAttention's
    grid, d = 128: 0.912 [0.905, 0.919] against 0.911 [0.909, 0.913], 10 points"."""
    return f"{r['metric']}, {r['item']}: {r['reason']}" + (" DISAGREE" if r["verdict"] == DISAGREE else "")
