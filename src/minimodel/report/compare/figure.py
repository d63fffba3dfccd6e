"""comparison.png (verdicts per part, and each timing ratio's change against its band), and the
three files a comparison writes."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from minimodel.floor.provenance import io
from minimodel.report.compare import inputs, timing
from minimodel.report.compare.rows import AGREE, DISAGREE, NOT_COMPARABLE

COLORS = {AGREE: "#4c9a2a", DISAGREE: "#c0392b", NOT_COMPARABLE: "#b0b0b0"}


def figure(table: pd.DataFrame, verdict: dict):
    """Verdicts per part, and each timing ratio's change against its band."""
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
        ratios["change"] = (ratios["run"].astype(float) / ratios["reference"].astype(float) - 1) * 100
        sns.stripplot(data=ratios, x="change", y="metric", hue="verdict", ax=right,
                      palette={AGREE: COLORS[AGREE], DISAGREE: COLORS[DISAGREE]}, size=6, jitter=0.15)
        for band in sorted(set(ratios["tolerance"])):
            right.axvspan(-band * 100, band * 100, color=COLORS[AGREE], alpha=0.06)
        right.axvline(0, color="black", lw=0.8)
        right.set_xlabel("speed ratio, run against reference (% change; shaded: the bands applied)")
        right.set_ylabel("")
    else:
        reasons = verdict["not_comparable"].get(timing.NAME, ["no timing rows"])
        right.text(0.5, 0.5, "timing not comparable:\n" + "\n".join(reasons), ha="center", va="center",
                   wrap=True, transform=right.transAxes)
        right.set_axis_off()
    fig.suptitle(f"{verdict['run']} against {verdict['reference']}")
    fig.tight_layout()
    return fig


def write(table: pd.DataFrame, verdict: dict, out: str | Path) -> None:
    """comparison.csv, verdict.json and comparison.png in `out`."""
    out = Path(out)
    io.write_csv(out / "comparison.csv", table)
    io.write_json(out / "verdict.json", verdict)
    io.save_figure(out / "comparison.png", figure(table, verdict), dpi=110, bbox_inches="tight")
