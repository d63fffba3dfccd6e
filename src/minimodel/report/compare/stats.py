"""The significance of a change between two runs' samples, and its correction for the many changes
a run judges.

A ratio (or a family's geometric mean) is judged on the logs of its samples: each run's samples are
one round each (the kernel and the other implementation timed in the same round, so that a drift
of the clock lands on both), the log ratios of a run are its sample.

The test (`significance`): Welch's t-test (`scipy.stats.ttest_ind`, unequal variances) of the two
runs' mean log ratios, two-sided, as asv pairs its factor with a U test: the band says whether a
change is large enough to matter, the test whether the samples tell it from the noise within the
runs, so a noisy point whose samples straddle the band is within noise. With k >= 10 a side its
p-value has no floor (an exact U test with 7 a side cannot go below 5.8e-4, above the corrected
level below).

The correction (`holm`): Holm's step-down over every ratio the test judges in a run, at `ALPHA`
for the whole run (the chance that any one ratio that did not move tests significant). Holm
holds that level whatever the dependence between the tests (the ratios of one point share the
kernel's samples), as Bonferroni does, and rejects at least as much; Benjamini-Hochberg would hold
a false-discovery rate, not the run's one false alarm.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

ALPHA = 0.01  # a whole run's chance that one ratio that did not move tests significant
CONFIDENCE = 0.95  # the intervals shown


def significance(run: list[np.ndarray], ref: list[np.ndarray]) -> np.ndarray:
    """Per change: the two-sided p-value of Welch's t-test between `run`'s log samples and `ref`'s
    (each a 1-d array of at least 2 samples)."""
    p = np.ones(len(run))
    shapes = {}
    for i, (a, b) in enumerate(zip(run, ref, strict=True)):
        shapes.setdefault((len(a), len(b)), []).append(i)
    for index in shapes.values():  # one vectorized test per pair of sample counts
        x, y = np.array([run[i] for i in index]), np.array([ref[i] for i in index])
        with np.errstate(invalid="ignore", divide="ignore"):
            got = stats.ttest_ind(x, y, axis=1, equal_var=False).pvalue
        # no spread on either side (a copy of a run): any change at all is beyond the noise
        same = x.mean(axis=1) == y.mean(axis=1)
        p[index] = np.where(np.isnan(got), np.where(same, 1.0, 0.0), got)
    return p


def holm(p) -> np.ndarray:
    """Holm's adjusted p-values: significant at ALPHA for the whole set where <= ALPHA."""
    p = np.asarray(p, dtype=float)
    m = len(p)
    if not m:
        return p
    order = np.argsort(p, kind="stable")
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = adjusted
    return out


def interval(logs: np.ndarray, center: float) -> tuple[float, float]:
    """The CONFIDENCE interval of a geometric mean around `center` (a ratio) from log samples:
    center * exp(+-t s / sqrt(k))."""
    k = len(logs)
    half = stats.t.ppf(0.5 + CONFIDENCE / 2, k - 1) * np.std(logs, ddof=1) / np.sqrt(k)
    return float(center * np.exp(-half)), float(center * np.exp(half))
