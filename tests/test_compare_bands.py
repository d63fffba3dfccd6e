"""The timing bands, derived again from the pairs of H200 runs they were set from (`compare.bands`'
docstring states these numbers), each run as its timing table (the key, status and ms columns, in
tests/data):
- the reference of 21e12cb (timing_21e12cb.csv) and the run before it (timing_33adea8.csv), every
  pass;
- the reference of c8af775 (timing_c8af775.csv) and the timing stage's run of 89ec4a1
  (timing_89ec4a1_forward.csv), the forward alone;
- each H200 rerun against the reference it was made against (timing_h200-rerun-N.csv; the whole
  runs are in git history, docs/reproducing.md's Reruns table names the commit of each): two of the
  c8af775 reference (the full workflow, then its timing stage again), two of the 1800db6 reference
  (timing_1800db6.csv; the full workflow from nothing, then its timing stage again), three of the
  28bb38c reference (timing_28bb38c.csv; the full workflow, then its timing stage again twice: the
  first of those said disagree under the bands of then, the second, by the bands of the six reruns
  before it, agree), and two of the b7352f1 reference (timing_b7352f1.csv; the full workflow, then
  its timing stage again), which by the bands of the seven reruns before them said agree.
Held out by reference: the bands derived without a reference's reruns hold each of them."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from minimodel.floor import contract
from minimodel.report.compare import bands, ratios

DATA = Path(__file__).resolve().parent / "data"
# each H200 rerun (tests/data/timing_<rerun>.csv), the reference it was made against, and its ratios
# that are numbers in both
RERUN_OF = [("h200-rerun-1", "c8af775", 444), ("h200-rerun-2", "c8af775", 444),
            ("h200-rerun-3", "1800db6", 445), ("h200-rerun-4", "1800db6", 445),
            ("h200-rerun-5", "28bb38c", 445), ("h200-rerun-6", "28bb38c", 445),
            ("h200-rerun-7", "28bb38c", 445), ("h200-rerun-8", "b7352f1", 445),
            ("h200-rerun-9", "b7352f1", 445)]


def timing(name: str) -> pd.DataFrame:
    return pd.read_csv(DATA / f"timing_{name}.csv")


def rerun_pair(rerun: str, against: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    reference = timing(against)
    return reference, timing(rerun)[reference.columns]


def first_pairs() -> list[tuple[pd.DataFrame, pd.DataFrame]]:
    c8af775 = timing("c8af775")
    return [(timing("21e12cb"), timing("33adea8")),
            (c8af775[c8af775["direction"] == contract.FORWARD], timing("89ec4a1_forward"))]


@pytest.fixture(scope="module")
def pairs():
    return first_pairs() + [rerun_pair(rerun, against) for rerun, against, _ in RERUN_OF]


@pytest.fixture(scope="module")
def changes(pairs):
    return bands.changes(pairs)


def test_the_bands_are_the_ones_the_committed_runs_give(pairs, changes):
    points, families = changes
    assert points.groupby("pair").size().tolist() == [421, 140, *(timed for *_, timed in RERUN_OF)]
    assert families.groupby("pair").size().tolist() == [46, 15, *[48] * len(RERUN_OF)]
    derived, apart, family = bands.derive(pairs)
    assert derived == bands.POINT_BANDS and apart == bands.RATIO_BANDS and family == bands.FAMILY_BAND
    # the run the level is set for is at least the reference's size
    side = ratios.side(timing("28bb38c"))
    numbers = side[side["ratio"].notna()]
    assert len(numbers) <= bands.RUN_RATIOS
    assert (numbers.groupby(ratios.FAMILY).size() >= 2).sum() <= bands.RUN_FAMILIES
    assert 1 - (1 - bands.level(bands.RUN_RATIOS)) ** bands.RUN_RATIOS == pytest.approx(bands.CHANCE)


@pytest.mark.parametrize(("rerun", "against", "timed"), RERUN_OF)
def test_the_bands_without_a_references_reruns_hold_them(rerun, against, timed):
    """Each rerun judged by the bands the other pairs give (those of its own reference left out):
    every ratio and family lies within its band. Until the second rerun of 28bb38c, the bands came
    from the first two pairs alone, and its kernel/fa4 forward + backward at (2, 4, 64, 64) causal
    (13.6 %) lay beyond their 12 %; the reruns of the other references give that group 31 %."""
    others = first_pairs() + [rerun_pair(r, a) for r, a, _ in RERUN_OF if a != against]
    groups, apart, family = bands.derive(others)
    points, families = bands.changes([rerun_pair(rerun, against)])
    assert len(points) == timed and len(families) == 48
    band = bands.point_band(points["grid"], points["N"], points["direction"], points["metric"],
                            derived_bands=(groups, apart))
    assert (np.abs(points["lc"]) < np.log1p(band)).all()
    assert (np.abs(families["lc"]) < np.log1p(family)).all()


def test_the_bands_of_then_did_not_hold_the_sixth_rerun(monkeypatch):
    """What the reruns added: the first two pairs alone, grouped as then (FlashAttention's grid by
    pass, the lab grid's every pass), give the bands of then (the lab grid's N < 1024: 12 %), and
    28bb38c's second rerun has one ratio beyond them: kernel/fa4 forward + backward at (2, 4, 64, 64)
    causal, 13.6 %, within today's 28.5 %."""
    monkeypatch.setattr(bands, "SPLIT_BY_PASS", (bands.FA,))
    groups, apart, family = bands.derive(first_pairs())
    assert groups == {(bands.FA, contract.FORWARD): 0.165, (bands.FA, contract.BACKWARD): 0.085,
                      (bands.FA, contract.FWD_BWD): 0.185, (bands.LARGE, bands.EVERY_PASS): 0.08,
                      (bands.SMALL, bands.EVERY_PASS): 0.12}
    assert apart == {(bands.FA, contract.BACKWARD, "kernel/fa4"): 0.275,
                     (bands.SMALL, bands.EVERY_PASS, "kernel/flex"): 0.99} and family == 0.06
    points, _ = bands.changes([rerun_pair("h200-rerun-6", "28bb38c")])
    band = bands.point_band(points["grid"], points["N"], points["direction"], points["metric"],
                            derived_bands=(groups, apart))
    beyond = points[np.abs(points["lc"]) >= np.log1p(band)]
    assert beyond[["grid", "N", "causal", "direction", "metric"]].to_numpy().tolist() == [
        [contract.LAB_GRID, 64, True, contract.FWD_BWD, "kernel/fa4"]]
    assert np.expm1(abs(beyond["lc"].iloc[0])) == pytest.approx(0.136, abs=5e-4)
    monkeypatch.undo()
    assert abs(beyond["lc"].iloc[0]) < np.log1p(bands.POINT_BANDS[(bands.SMALL, contract.FWD_BWD)])


def test_the_second_pair_moved_more_on_flashattentions_grid(changes):
    """Its forward ratios against the first pair's: it was timed another way, and is one pair of
    eight."""
    points, _ = changes
    forward = points[(points["grid"] == contract.FLASHATTENTION_GRID)
                     & (points["direction"] == contract.FORWARD)]
    first, second = (np.abs(forward.loc[forward["pair"] == i, "lc"]) for i in (0, 1))
    assert first.mean() < 0.01 < 0.019 < second.mean()
    assert stats.mannwhitneyu(first, second).pvalue < 1e-4


def test_one_ratio_moves_more_than_its_groups(changes):
    """kernel/flex at the lab grid's small N, forward and forward + backward, and no other (group,
    ratio); each apart by a scale twice its group's or more."""
    points, _ = changes
    tests = bands.apart(points)
    assert len(tests) == 48
    split = tests[tests["apart"]]
    assert {(*g, m) for g, m in zip(split["group"], split["metric"], strict=True)} == set(bands.RATIO_BANDS)
    flex = split["metric"] == "kernel/flex"
    assert (split.loc[flex, "scale"] > 1.9 * split.loc[flex, "rest"]).all()
    # kernel/fa4's backward on FlashAttention's grid: 1.77 % against 1.31 %
    assert (split.loc[~flex, "scale"] > 1.3 * split.loc[~flex, "rest"]).all()
    # the nearest to apart: kernel/fa4's backward at the lab grid's N >= 1024, 1.74 % against 0.98 %
    near = tests[~tests["apart"]].sort_values("p").iloc[0]
    assert (*near["group"], near["metric"]) == (bands.LARGE, contract.BACKWARD, "kernel/fa4")
    assert bands.SPLIT_LEVEL < near["p"] < 0.014
    assert tests.loc[~tests["apart"], "p"].nsmallest(2).iloc[1] > 0.1
    # a group's band no longer carries them, and theirs is wider
    for (grid, direction, metric), band in bands.RATIO_BANDS.items():
        assert band > bands.POINT_BANDS[(grid, direction)]
        at = (contract.LAB_GRID, 64) if grid == bands.SMALL else (contract.FLASHATTENTION_GRID, 4096)
        assert bands.point_band(*at, direction, [metric])[0] == band


def test_a_ratio_no_data_split_has_its_groups_band():
    small = bands.POINT_BANDS[(bands.SMALL, contract.FORWARD)]
    large = bands.POINT_BANDS[(bands.LARGE, contract.FORWARD)]
    assert bands.point_band(["lab"], [64], ["forward"], ["kernel/flex"])[0] == 0.585
    assert bands.point_band(["lab"], [64], ["forward"], ["kernel/mine"])[0] == small
    assert bands.point_band(["lab"], [4096], ["forward"], ["kernel/flex"])[0] == large
    assert bands.point_band(["lab"], [64], ["forward"])[0] == small
    assert bands.point_band(["lab"], [64], ["backward"], ["kernel/flex"])[0] == bands.POINT_BANDS[
        (bands.SMALL, contract.BACKWARD)]
    fa = [bands.point_band(["flashattention"], [4096], [d], ["kernel/fa2"])[0] for d in contract.DIRECTIONS]
    assert fa == [bands.POINT_BANDS[(bands.FA, d)] for d in contract.DIRECTIONS]
    fa4 = [bands.point_band(["flashattention"], [4096], [d], ["kernel/fa4"])[0] for d in contract.DIRECTIONS]
    assert fa4 == [bands.POINT_BANDS[(bands.FA, contract.FORWARD)], 0.21,
                   bands.POINT_BANDS[(bands.FA, contract.FWD_BWD)]]


def test_one_committed_change_lies_beyond_its_band(changes):
    """Of the 4,564 ratios the bands are derived from, one lies beyond its band, as a level of 2.2e-5
    per ratio allows (P = 9.7 %): the second pair's kernel/flex forward at (2, 16, 8192, 128), at
    the power limit, 15.5 % against FlashAttention's forward 14.0 %. No family does."""
    points, families = changes
    band = bands.point_band(points["grid"], points["N"], points["direction"], points["metric"])
    beyond = points[np.abs(points["lc"]) >= np.log1p(band)]
    assert len(points) == 4564
    assert beyond[["pair", "grid", "B", "H", "N", "d", "direction", "metric"]].to_numpy().tolist() == [
        [1, contract.FLASHATTENTION_GRID, 2, 16, 8192, 128, contract.FORWARD, "kernel/flex"]]
    assert np.expm1(abs(beyond["lc"].iloc[0])) == pytest.approx(0.155, abs=5e-4)
    assert stats.poisson.sf(0, len(points) * bands.level(bands.RUN_RATIOS)) == pytest.approx(0.097, abs=0.001)
    assert (np.abs(families["lc"]) < np.log1p(bands.FAMILY_BAND)).all()
    assert bands.FAMILY_BAND < min(bands.POINT_BANDS.values())  # a family moves less than its points


def test_the_tail_is_exponential_not_normal(changes):
    """On FlashAttention's grid: the counts beyond 2-10 % against the Laplace fit's, and the normal
    of the same spread, which 24 changes beyond 6 % refute (1.8 expected)."""
    points, _ = changes
    x = np.abs(points.loc[points["grid"] == contract.FLASHATTENTION_GRID, "lc"].to_numpy())
    assert len(x) == 3250
    beyond = [0.02, 0.04, 0.06, 0.08, 0.10]
    assert [int((x > t).sum()) for t in beyond] == [665, 93, 24, 5, 2]
    laplace = [len(x) * np.exp(-t / x.mean()) for t in beyond]
    assert np.round(laplace, 1).tolist() == [695.2, 148.7, 31.8, 6.8, 1.5]
    normal = len(x) * 2 * stats.norm.sf(0.06 / np.sqrt(np.mean(x ** 2)))
    assert round(normal, 1) == 1.8 and stats.poisson.sf(23, normal) < 1e-9


def test_the_groups_differ_where_the_data_says(changes):
    """On the pairs that have every pass; the families on every pair."""
    points, families = changes
    points = points[points["pair"] != 1]
    where = pd.Series([g for g, _ in points["group"]], index=points.index)
    x = np.abs(points["lc"])

    def apart(a, b):
        return stats.mannwhitneyu(x[where == a], x[where == b]).pvalue

    def passes(grid):
        each = [x[(where == grid) & (points["direction"] == d)] for d in contract.DIRECTIONS]
        return stats.kruskal(*each).pvalue

    groups = (bands.FA, bands.SMALL, bands.LARGE)
    assert max(apart(a, b) for i, a in enumerate(groups) for b in groups[i + 1:]) < 1e-14
    assert passes(bands.SMALL) < 1e-5 and passes(bands.FA) < 1e-5 and passes(bands.LARGE) < 1e-4
    assert bands.SPLIT_BY_PASS == (bands.FA, bands.SMALL, bands.LARGE)
    def over_n(frame):
        return stats.kruskal(*[np.abs(v["lc"]) for _, v in frame.groupby("N")]).pvalue

    # N on FlashAttention's grid: over every pass p = 0.009, from the backward alone, in no order
    fa = points[where == bands.FA]
    assert 0.005 < over_n(fa) < 0.01
    by_pass = {d: over_n(fa[fa["direction"] == d]) for d in contract.DIRECTIONS}
    assert by_pass[contract.BACKWARD] < 1e-3
    assert min(by_pass[contract.FORWARD], by_pass[contract.FWD_BWD]) > 0.05
    backward = fa[fa["direction"] == contract.BACKWARD]
    scale = backward["lc"].abs().groupby(backward["N"]).mean()
    assert scale.idxmin() == 8192 and scale.idxmax() == 16384 and scale[4096] > scale[2048]
    fx = np.abs(families["lc"])
    assert stats.kruskal(*[fx[families["direction"] == d] for d in contract.DIRECTIONS]).pvalue > 0.1
    assert stats.kruskal(*[fx[families["grid"] == g] for g in (bands.FA, bands.LAB)]).pvalue > 0.05


def test_one_band_a_pass_on_flashattentions_grid_keeps_a_run_near_its_level(changes):
    """The expected false alarms of a rerun's ratios (before the significance test), each ratio at
    its band with the Laplace scale of its group, or of its group at its N: 0.0085 and 0.02. The
    second reads each scale from 18-216 changes, and the exponential tail makes such noise count up
    (Jensen), so it is the upper reading."""
    points, _ = changes
    reruns = points[points["pair"] >= 2].copy()
    reruns["band"] = bands.point_band(reruns["grid"], reruns["N"], reruns["direction"], reruns["metric"])
    reruns["key"] = [k if k in bands.RATIO_BANDS else (*k[:2], "") for k in bands.ratio_keys(reruns)]
    pairs = reruns["pair"].nunique()

    def alarms(by):
        return sum(len(x) / pairs * np.exp(-np.log1p(x["band"].iloc[0]) / np.abs(x["lc"]).mean())
                   for _, x in reruns.groupby(by))

    assert alarms(["key"]) == pytest.approx(0.0085, abs=5e-4) and alarms(["key"]) < bands.CHANCE
    assert alarms(["key", "N"]) == pytest.approx(0.0205, abs=5e-4)
    assert reruns.groupby(["key", "N"]).size().between(18, 216).all()


def test_the_docs_give_the_bands_the_committed_runs_give(changes):
    """docs/reproducing.md's table of bands: each group's mean change and band as derived here."""
    points, families = changes
    text = (DATA.parents[1] / "docs" / "reproducing.md").read_text()
    small, large = "lab grid, N < 1024 (3–21 µs kernels)", "lab grid, N ≥ 1024"
    names = {contract.FORWARD: "forward", contract.BACKWARD: "backward",
             contract.FWD_BWD: "forward + backward"}
    labels = {**{(bands.FA, d): f"FlashAttention's grid, {name}" for d, name in names.items()},
              **{(bands.SMALL, d): f"{small}, {name}" for d, name in names.items()},
              **{(bands.LARGE, d): f"{large}, {name}" for d, name in names.items()}}
    assert set(labels) == set(bands.POINT_BANDS)
    key = pd.Series(bands.ratio_keys(points), index=points.index)
    own = key.isin(list(bands.RATIO_BANDS))
    for group, label in labels.items():
        mean = np.abs(points.loc[points["group"].map(lambda g, group=group: g == group) & ~own, "lc"]).mean()
        assert f"| {label} | {mean * 100:.2f} % | {bands.POINT_BANDS[group] * 100:.1f} % |" in text, label
    for (grid, direction, metric), band in bands.RATIO_BANDS.items():
        label = f"{labels[(grid, direction)]}: {metric} alone"
        mean = np.abs(points.loc[key.map(lambda k, r=(grid, direction, metric): k == r), "lc"]).mean()
        assert f"| {label} | {mean * 100:.2f} % | {band * 100:.1f} % |" in text, label
    mean = np.abs(families["lc"]).mean()
    assert f"| a family's geometric mean | {mean * 100:.2f} % | {bands.FAMILY_BAND * 100:.1f} % |" in text
