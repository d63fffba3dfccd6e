"""How far a timing ratio, and a family's geometric mean, may move between two runs on one GPU model
as noise: the bands, derived from real H200 runs (`derive`; `tests/test_compare_bands.py` derives
them again from the committed runs and holds these numbers to it).

The data: pairs of H200 runs, each pair made the same way by the same code, one number a side (a
row's `ms`):
- the reference of 21e12cb and the one before it (commit 33adea8, the run of c601386), each
  implementation timed alone, every pass: 421 ratios that are numbers in both, 46 families;
- the reference of c8af775 and the timing stage's run of 89ec4a1 (10 samples a row in interleaved
  rounds, 40 ms of warm-up, without fa4), the forward alone (the kernel's backward changed between
  them): 140 ratios, 15 families. At (2, 16, 8192, 128), at the power limit, the kernel's own time
  moved 7.6 % (and flex's 6.7 % the other way); kernel/flex at the lab grid's N = 64 moved 16-20 %
  (flex's compiled kernel there runs in 11 or 13.5 us, and which one a run gets changes between
  runs);
- each H200 rerun against the reference it was made against (their timing tables in tests/data;
  docs/reproducing.md's Reruns table names the commit that holds each whole), every pass,
  10 samples a row: two of the c8af775 reference, two of 1800db6's, three of 28bb38c's, two of
  b7352f1's; 444 or 445 ratios and 48 families each.
3,250 ratios on FlashAttention's grid, 658 on the lab grid's N < 1024 and 656 above, 493 families.
Until 28bb38c's second rerun the bands came from the first two pairs alone, and the reruns were
held out as tests of them; that rerun's kernel/fa4 forward + backward at (2, 4, 64, 64) causal
moved 13.6 % against the 12 % those two pairs gave the lab grid's N < 1024 (where the reruns moved
1.4-2.4 % on average, the first pairs 1.05 %): two pairs, one timed in another way and one
without the backward, had not seen how far the smallest kernels move. Every pair now counts, and
the held-out test is by reference: the bands derived without a reference's reruns hold each of
them (`tests/test_compare_bands.py`). With six reruns FlashAttention's grid had one band for every
pass (15 %; its passes then differed at p = 0.055); 28bb38c's third rerun, judged by those bands
before it was added (agree), made that difference significant, and each pass has its band now.
b7352f1's two reruns, judged by the bands of the seven before them (agree; their largest changes
0.67 of their bands), set kernel/fa4's backward on FlashAttention's grid apart (p = 0.011 before,
0.002 with them).

The model: a ratio's log change between runs, x = ln(run / reference), has an exponential tail
(Laplace), P(|x| > t) = exp(-t / b), its scale b the mean of |x|. On FlashAttention's grid
(b = 1.30 %): 665, 93, 24, 5 and 2 changes beyond 2, 4, 6, 8 and 10 %, where the Laplace fit says
695, 149, 32, 6.8 and 1.5, and a normal of the same spread 1.8 beyond 6 %. A power tail
(a generalized Pareto over the largest 10-50 %) cannot be fitted stably from a few hundred values:
on the first pair alone its band moved from 24 % to 88 % with the threshold. The exponential tail
is the lightest the data does not refute.

The level: a whole run of `RUN_RATIOS` ratios has at most `CHANCE` (1 %) chance of one ratio beyond
its band by noise: each ratio 1 - 0.99 ** (1 / 450) = 2.2e-5, so the band is exp(b ln(1 / 2.2e-5))
- 1 = exp(10.71 b) - 1, rounded up to the next half percent. Families alike, over `RUN_FAMILIES`
(ln(1 / 2.0e-4) = 8.51).

The groups (|x| compared with Mann-Whitney or Kruskal-Wallis over the pairs that have every pass):
FlashAttention's grid, the lab grid's N < 1024 (kernels of 3-21 us) and its N >= 1024 move
differently (p < 1e-14 for each two); within each the passes differ (p = 3e-6 on FlashAttention's
grid, 1e-6 below N = 1024, 3e-5 above), so each pass has its band. N on FlashAttention's grid
differs at p = 0.009 over every pass (0.068 before b7352f1's reruns), in the backward alone
(2e-4; forward 0.10, forward + backward 0.57) and with no order in N (mean |x| 1.14 % at 8192,
1.53 % at 4096, 1.66 % at 16384): the grid keeps one band a pass. Read by the scale of each
group at each N (the ratios apart on their own) the bands give 0.02 false alarms a run of the
reruns, before the significance test, and 0.0085 by the groups' own scales; each such scale is
read from 18 to 216 changes. The families do not differ by pass or grid at 5 % (p = 0.11 and
0.09): one band.

The ratios apart: within a group, one ratio can move more than the others, when one
implementation's time is less repeatable between processes than the rest's; it then gets a band of
its own, and the group's band is the rest's (`apart`): each ratio's scale against the rest of its
group by the F-test that the Laplace model gives (the ratio of two mean |x| follows F(2 n1, 2 n2)
at equal scales), one-sided, Holm over the 48 (group, ratio) tests, apart at `SPLIT_LEVEL`. Three are:
kernel/flex at the lab grid's N < 1024, forward (b = 4.29 % against the rest's 1.47 %, p < 1e-10)
and forward + backward (4.52 % against 2.31 %, p = 0.001): flex's compiled call at N = 64 runs at
one of two speeds, fixed for a process (notes/timing.md); and kernel/fa4's backward on
FlashAttention's grid (1.77 % against 1.31 %, p = 0.002). The next, kernel/fa4's backward at the
lab grid's N >= 1024 (1.74 % against 0.98 %), has p = 0.013; the one after it 0.11.

The derived bands (b: mean |x|; band):
- FlashAttention's grid: forward 1.21 %: 14.0 %; backward 1.31 %: 15.5 % (kernel/fa4 1.77 %:
  21.0 %); forward + backward 1.31 %: 15.5 %;
- the lab grid's N < 1024: forward 1.47 %: 17.5 % (kernel/flex 4.29 %: 58.5 %); backward 1.76 %:
  21.0 %; forward + backward 2.31 %: 28.5 % (kernel/flex 4.52 %: 62.5 %);
- the lab grid's N >= 1024: forward 0.70 %: 8.0 %; backward 1.14 %: 13.0 %; forward + backward
  0.83 %: 9.5 %;
- a family's geometric mean: b = 0.65 %: 6.0 %.
A run without samples, or a point with fewer than `MIN_SAMPLES` a side, is judged by the wider
max(band, `OLDER_FLOOR`) (asv's factor 1.1): without samples no test can tell noise from a change.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import scipy.stats

from minimodel.floor import contract
from minimodel.report.compare import ratios, stats

CHANCE = 0.01  # a whole run's chance of one false alarm
RUN_RATIOS = 450  # the ratios of a run the bands are set for (the reference has 447)
RUN_FAMILIES = 50  # and its families (the reference has 48)
STEP = 0.005  # bands are rounded up to a half percent
OLDER_FLOOR = 0.10  # the wider rule: max(band, 10 %)
MIN_SAMPLES = 10  # samples a side for the significance test
LAB_LARGE_N = 1024  # the lab grid's points from here on move less
SPLIT_LEVEL = 0.01  # a ratio that moves more than its group (Holm-adjusted p) gets a band of its own

FA, LAB = contract.FLASHATTENTION_GRID, contract.LAB_GRID
LARGE, SMALL = f"{LAB} N >= {LAB_LARGE_N}", f"{LAB} N < {LAB_LARGE_N}"
EVERY_PASS = "every pass"  # a group whose passes move alike
SPLIT_BY_PASS = (FA, SMALL, LARGE)  # the groups whose passes have bands of their own
F, B, FB = contract.FORWARD, contract.BACKWARD, contract.FWD_BWD
POINT_BANDS = {
    (FA, F): 0.14, (FA, B): 0.155, (FA, FB): 0.155,
    (SMALL, F): 0.175, (SMALL, B): 0.21, (SMALL, FB): 0.285,
    (LARGE, F): 0.08, (LARGE, B): 0.13, (LARGE, FB): 0.095,
}
# the ratios that move more than the rest of their group (`apart`), each with a band of its own
RATIO_BANDS = {(FA, B, "kernel/fa4"): 0.21, (SMALL, F, "kernel/flex"): 0.585,
               (SMALL, FB, "kernel/flex"): 0.625}
FAMILY_BAND = 0.06
WIDEST = max(POINT_BANDS.values())  # a grid or pass the data has not seen
# a change equal to its band is within it: log1p(expm1(x)) is x within a few ulps, not exactly
SLACK = 1e-12
# How a timing row was judged (its `rule`): its band and both runs' samples, or the wider band
# (followed by why), or its status (not a number on a side).
BY_SAMPLES, WIDER, BY_STATUS = "band and samples", "wider band: ", "status"


def group(grid, n, direction) -> list[tuple[str, str]]:
    """The group each point's band is derived on (arrays or scalars alike): FlashAttention's grid,
    or the lab grid by its N, each with its pass where `SPLIT_BY_PASS` names it."""
    grid, n = np.atleast_1d(np.asarray(grid, dtype=object)), np.atleast_1d(np.asarray(n))
    where = np.where(grid == LAB, np.where(n >= LAB_LARGE_N, LARGE, SMALL), grid)
    passes = np.atleast_1d(np.asarray(direction, dtype=object))
    return [(g, d if g in SPLIT_BY_PASS else EVERY_PASS) for g, d in zip(where, passes, strict=True)]


def point_band(grid, n, direction, metric=None, derived_bands=None) -> np.ndarray:
    """Each point's band: its ratio's own where `RATIO_BANDS` has one (`metric`, as "kernel/flex",
    given), else its group's; `WIDEST` where the data has none (a grid or pass of no committed run).
    `derived_bands`: (groups, ratios apart) as `derive` gives them, in place of the module's."""
    groups = group(grid, n, direction)
    metrics = [None] * len(groups) if metric is None else np.atleast_1d(np.asarray(metric, dtype=object))
    points, own = derived_bands or (POINT_BANDS, RATIO_BANDS)
    return np.array([own.get((*g, m), points.get(g, WIDEST)) for g, m in zip(groups, metrics, strict=True)])


def derived(grid, n, direction) -> np.ndarray:
    """Whether each point's group has a band derived from committed runs (else `point_band` gives it
    `WIDEST`, and the verdict says so)."""
    return np.array([g in POINT_BANDS for g in group(grid, n, direction)], dtype=bool)


def beyond(change, tolerance) -> np.ndarray:
    """Whether each change (max/min - 1) is beyond its tolerance: a change equal to it is not."""
    return np.log1p(np.asarray(change, dtype=float)) > np.log1p(np.asarray(tolerance, dtype=float)) + SLACK


def wider(band):
    """The rule for a point without samples, or with too few: max(band, OLDER_FLOOR)."""
    return np.maximum(band, OLDER_FLOOR)


def level(items: int, chance: float = CHANCE) -> float:
    """The chance per item that keeps `items` of them at `chance` of one false alarm (Sidak)."""
    return 1 - (1 - chance) ** (1 / items)


def laplace_band(log_changes, items: int) -> float:
    """The band, rounded up to STEP, that a Laplace-tailed log change (scale: mean |x|) passes with
    `level(items)`: exp(b ln(1 / level)) - 1."""
    scale = float(np.mean(np.abs(log_changes)))
    return round(math.ceil(round(math.expm1(scale * math.log(1 / level(items))) / STEP, 6)) * STEP, 4)


def changes(pairs: list[tuple[pd.DataFrame, pd.DataFrame]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(ratio changes, family changes) of each pair of runs' timing tables, a pair being two runs
    made the same way by the same code (each table cut to the passes where they are): each ratio's
    `lc` with its `group` and `pair`; each family's mean `lc` over the points both runs of its
    pair timed (two or more)."""
    points = pd.concat([ratios.log_changes(ratios.side(a), ratios.side(b)).assign(pair=i)
                        for i, (a, b) in enumerate(pairs)], ignore_index=True)
    points["group"] = group(points["grid"], points["N"], points["direction"])
    families = (points.groupby(["pair", *ratios.FAMILY]).agg(lc=("lc", "mean"), points=("lc", "size"))
                .reset_index())
    return points, families[families["points"] >= 2].reset_index(drop=True)


def ratio_keys(points: pd.DataFrame) -> list[tuple[str, str, str]]:
    """Each of `changes`' points as `RATIO_BANDS` keys it: (group, pass, metric)."""
    return [(*g, m) for g, m in zip(points["group"], points["metric"], strict=True)]


def apart(points: pd.DataFrame) -> pd.DataFrame:
    """Each (group, metric) against the rest of its group (`changes`' points): the scales (mean |x|)
    of both, the one-sided p of the first being larger, Holm-adjusted over every test, and whether
    it is apart (p <= SPLIT_LEVEL). Under the Laplace model |x| / b is exponential, so the ratio of
    two groups' mean |x| follows F(2 n1, 2 n2) when their scales are equal."""
    tests = []
    for g, within in points.groupby("group", sort=True):
        size = np.abs(within["lc"].to_numpy(float))
        for m in sorted(within["metric"].unique()):
            own = (within["metric"] == m).to_numpy()
            if own.all():
                continue
            scale, rest = size[own].mean(), size[~own].mean()
            tests.append({"group": g, "metric": m, "scale": scale, "rest": rest,
                          "p": float(scipy.stats.f.sf(scale / rest, 2 * own.sum(), 2 * (~own).sum()))})
    table = pd.DataFrame(tests, columns=["group", "metric", "scale", "rest", "p"])
    table["p"] = stats.holm(table["p"].to_numpy(float))
    table["apart"] = table["p"] <= SPLIT_LEVEL
    return table


def derive(pairs: list[tuple[pd.DataFrame, pd.DataFrame]]) -> tuple[dict, dict, float]:
    """(POINT_BANDS, RATIO_BANDS, FAMILY_BAND) as the pairs of runs' timing tables give them: the
    ratios `apart` from their group have a band of their own, and the group's is the rest's."""
    points, families = changes(pairs)
    split = {(*r.group, r.metric) for r in apart(points).itertuples() if r.apart}
    own = np.array([key in split for key in ratio_keys(points)], dtype=bool)
    groups = {g: laplace_band(x["lc"], RUN_RATIOS) for g, x in points[~own].groupby("group")}
    ratios_apart = {(*g, m): laplace_band(x["lc"], RUN_RATIOS)
                    for (g, m), x in points[own].groupby(["group", "metric"])}
    return groups, ratios_apart, laplace_band(families["lc"], RUN_FAMILIES)
