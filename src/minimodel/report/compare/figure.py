"""comparison.png (verdicts per part, and each timing ratio's change against its band), and the
three files a comparison writes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from minimodel.floor.provenance import io
from minimodel.report.compare import inputs, timing
from minimodel.report.compare.rows import AGREE, DISAGREE, NOT_COMPARABLE

COLORS = {AGREE: "#4c9a2a", DISAGREE: "#c0392b", NOT_COMPARABLE: "#b0b0b0"}


def figure(table: pd.DataFrame, verdict: dict):
    """Verdicts per part, and each timing ratio's change as a fraction of its band."""
    # not at the top: `python -m minimodel` imports this module for every command, and draws only here
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after the backend is chosen
    import seaborn as sns  # as pyplot

    judged = table[table["part"] != inputs.NAME]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [1, 1.6]})
    counts = judged.groupby(["part", "verdict"]).size().unstack(fill_value=0)
    counts = counts.reindex(columns=[c for c in (AGREE, DISAGREE, NOT_COMPARABLE) if c in counts])
    counts.plot.barh(stacked=True, ax=left, color=COLORS)
    left.set_xlabel("numbers compared")
    left.set_ylabel("")
    left.set_title(f"verdict: {verdict['verdict']}")
    ratios = judged[(judged["part"] == timing.NAME) & judged["difference"].notna()].copy()
    if len(ratios):
        ratios["against band"] = against_band(ratios)
        sns.stripplot(data=ratios, x="against band", y="metric", hue="verdict", ax=right,
                      palette={AGREE: COLORS[AGREE], DISAGREE: COLORS[DISAGREE]}, size=6, jitter=0.15)
        right.axvspan(-1, 1, color=COLORS[AGREE], alpha=0.08)
        for edge in (-1, 1):
            right.axvline(edge, color=COLORS[AGREE], lw=0.8)
        right.axvline(0, color="black", lw=0.8)
        reach = max(1.2, float(ratios["against band"].abs().max()) * 1.1)
        right.set_xlim(-reach, reach)
        right.set_xlabel("change of each speed ratio, run against reference, as a fraction of its band "
                         "(shaded: within)")
        right.set_ylabel("")
    else:
        reasons = verdict["not_comparable"].get(timing.NAME, ["no timing rows"])
        right.text(0.5, 0.5, "timing not comparable:\n" + "\n".join(reasons), ha="center", va="center",
                   wrap=True, transform=right.transAxes)
        right.set_axis_off()
    fig.suptitle(f"{verdict['run']} against {verdict['reference']}")
    fig.tight_layout()
    return fig


def against_band(ratios: pd.DataFrame) -> pd.Series:
    """Each ratio's change, run against reference, as the verdict measures it against its band
    (`bands.beyond`: in logs), signed: -1 and 1 are the band's edges. Every ratio reads on one
    scale, whatever its band (from 8 % to kernel/flex's 69 %)."""
    change = np.log(ratios["run"].astype(float) / ratios["reference"].astype(float))
    return change / np.log1p(ratios["tolerance"].astype(float))


def write(table: pd.DataFrame, verdict: dict, out: str | Path) -> None:
    """comparison.csv, verdict.json and comparison.png in `out`."""
    out = Path(out)
    io.write_csv(out / "comparison.csv", table)
    io.write_json(out / "verdict.json", verdict)
    io.save_figure(out / "comparison.png", figure(table, verdict), dpi=110, bbox_inches="tight")
