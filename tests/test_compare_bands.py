"""The timing bands, derived again from the two committed H200 runs they were set from, both timed
one implementation at a time: the reference of 21e12cb and the run before it (33adea8), each as its
timing.csv's key, status and ms columns (tests/data/timing_21e12cb.csv, `git show
f7bfa29:results/reference/nvidia-h200/gpu/timing/timing.csv`; tests/data/timing_33adea8.csv, `git
show 33adea8:...`). `compare.bands`' docstring states these numbers."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from minimodel.floor import contract
from minimodel.report.compare import bands, ratios

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="module")
def runs():
    return [pd.read_csv(DATA / "timing_21e12cb.csv"), pd.read_csv(DATA / "timing_33adea8.csv")]


@pytest.fixture(scope="module")
def changes(runs):
    return bands.changes(runs)


def test_the_bands_are_the_ones_the_committed_runs_give(runs, changes):
    points, families = changes
    assert (len(points), len(families)) == (421, 46)
    derived, family = bands.derive(runs)
    assert derived == bands.POINT_BANDS and family == bands.FAMILY_BAND
    # the run the level is set for is at least the reference's size
    side = ratios.side(runs[0])
    numbers = side[side["ratio"].notna()]
    assert len(numbers) <= bands.RUN_RATIOS
    assert (numbers.groupby(ratios.FAMILY).size() >= 2).sum() <= bands.RUN_FAMILIES
    assert 1 - (1 - bands.level(bands.RUN_RATIOS)) ** bands.RUN_RATIOS == pytest.approx(bands.CHANCE)


def test_no_committed_change_lies_beyond_its_band(changes):
    points, families = changes
    band = bands.point_band(points["grid"], points["N"], points["direction"])
    assert (np.abs(points["lc"]) < np.log1p(band)).all()
    assert (np.abs(families["lc"]) < np.log1p(bands.FAMILY_BAND)).all()
    assert bands.FAMILY_BAND < min(bands.POINT_BANDS.values())  # a family moves less than its points


def test_the_tail_is_exponential_not_normal(changes):
    """On FlashAttention's grid: the counts beyond 1-5 % against the Laplace fit's, and the normal
    of the same spread, which 7 changes beyond 5 % refute."""
    points, _ = changes
    x = np.abs(points.loc[points["grid"] == contract.FLASHATTENTION_GRID, "lc"].to_numpy())
    beyond = [0.01, 0.02, 0.03, 0.04, 0.05]
    assert [int((x > t).sum()) for t in beyond] == [132, 46, 19, 11, 7]
    laplace = [len(x) * np.exp(-t / x.mean()) for t in beyond]
    assert np.round(laplace).astype(int).tolist() == [128, 55, 24, 10, 4]
    normal = len(x) * 2 * stats.norm.sf(0.05 / np.sqrt(np.mean(x ** 2)))
    assert round(normal, 1) == 1.1 and stats.poisson.sf(6, normal) < 3e-4


def test_the_groups_differ_where_the_data_says(changes):
    points, _ = changes
    where = pd.Series([g for g, _ in points["group"]], index=points.index)
    x = np.abs(points["lc"])

    def apart(a, b):
        return stats.mannwhitneyu(x[where == a], x[where == b]).pvalue

    def passes(grid):
        each = [x[(where == grid) & (points["direction"] == d)] for d in contract.DIRECTIONS]
        return stats.kruskal(*each).pvalue

    assert apart(bands.LARGE, bands.FA) < 0.01 and apart(bands.LARGE, bands.SMALL) < 0.05
    assert apart(bands.SMALL, bands.FA) > 0.5
    assert passes(bands.FA) < 0.05 and passes(bands.LARGE) > 0.1 and passes(bands.SMALL) > 0.5
    assert bands.SPLIT_BY_PASS == (bands.FA,)


def test_the_docs_give_the_bands_the_committed_runs_give(changes):
    """docs/reproducing.md's table of bands: each group's mean change and band as derived here."""
    points, families = changes
    text = (DATA.parents[1] / "docs" / "reproducing.md").read_text()
    labels = {(bands.FA, contract.FORWARD): "FlashAttention's grid, forward",
              (bands.FA, contract.BACKWARD): "FlashAttention's grid, backward",
              (bands.FA, contract.FWD_BWD): "FlashAttention's grid, forward + backward",
              (bands.LARGE, bands.EVERY_PASS): "lab grid, N ≥ 1024, every pass",
              (bands.SMALL, bands.EVERY_PASS): "lab grid, N < 1024 (3–21 µs kernels), every pass"}
    assert set(labels) == set(bands.POINT_BANDS)
    for group, label in labels.items():
        mean = np.abs(points.loc[points["group"].map(lambda g, group=group: g == group), "lc"]).mean()
        assert f"| {label} | {mean * 100:.2f} % | {bands.POINT_BANDS[group] * 100:.1f} % |" in text, label
    mean = np.abs(families["lc"]).mean()
    assert f"| a family's geometric mean | {mean * 100:.2f} % | {bands.FAMILY_BAND * 100:.1f} % |" in text
