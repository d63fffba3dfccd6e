"""Lab 02's correctness figure (notes/labs.md): every case's error over its own tolerance, a panel per
implementation and pass, the forward's and the gradients', so that a failed backward shows where
the forward's passes do.

A backward row reads as a forward row does (`correctness_rule.grad_errors`: the error and tolerance
of the gradient nearest its tolerance), so both passes are drawn the same way.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from minimodel.floor import contract
from minimodel.report.plots import IMPL_LABELS

RATIO_FLOOR = 1e-4  # an exact result (error 0) is drawn here on the log axis
PASS, FAIL, NO_ERROR, SKIP = "pass", "fail", "fail, no error to draw", contract.SKIPPED
VERDICT_STYLE = {PASS: ("tab:blue", "o"), FAIL: ("tab:red", "o"), NO_ERROR: ("tab:red", "X")}
DTYPE_SHORT = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}
PASSES = {contract.FORWARD: "forward", contract.BACKWARD: "gradients (dQ, dK, dV)"}  # a panel's pass


def _cases(rows: pd.DataFrame) -> pd.DataFrame:
    """Every row of both passes with its case label, implementation, pass, verdict and the y it is
    drawn at.

    The verdict is the table's (`passed`, `skipped`; a case that ran without a true `passed`
    fails); y is the error over the row's own tolerance, which the verdict compares with 1. A
    failure with no error (the call raised, hung, returned the wrong shape or NaN, or an output
    autograd cannot differentiate) is drawn at the panel's top, a skipped case not at all.
    """
    data = contract.with_direction(rows)
    data = data[data["direction"].isin(list(PASSES))].copy()
    if "impl" not in data:
        data["impl"] = contract.TRITON
    data["implementation"] = [IMPL_LABELS.get(i, f"{i} (contender)") for i in data["impl"]]
    data["pass"] = data["direction"].map(PASSES)
    dtype = data["dtype"].map(DTYPE_SHORT).fillna(data["dtype"])
    data["case"] = (dtype + " d=" + data["d"].astype(str) + " N=" + data["N"].astype(str)
                    + np.where(data["causal"].astype(bool), " causal", ""))
    err = pd.to_numeric(data["err_kernel_vs_fp64"], errors="coerce")
    data["ratio"] = err / pd.to_numeric(data["tolerance"], errors="coerce")
    skipped = data["skipped"].eq(True)
    passed = data["passed"].eq(True) & ~skipped
    data["verdict"] = np.select([skipped, passed, data["ratio"].notna()], [SKIP, PASS, FAIL], NO_ERROR)
    data["drawn_at"] = np.select([data["verdict"].isin([PASS, FAIL]), data["verdict"] == NO_ERROR],
                                 [data["ratio"].clip(lower=RATIO_FLOOR), _ratio_top(data)], np.nan)
    data["reason"] = data["reason"].fillna("").astype(str) if "reason" in data else ""
    dtypes = {d: i for i, d in enumerate(dict.fromkeys(data["dtype"]))}  # the sweep's (the config's) order
    order = (data.assign(dtype_rank=data["dtype"].map(dtypes)).drop_duplicates("case")
             .sort_values(["dtype_rank", "d", "N", "causal"])["case"])
    data["position"] = data["case"].map({c: i for i, c in enumerate(order)})
    return data.sort_values(["position"], kind="stable").reset_index(drop=True)


def _ratio_top(data: pd.DataFrame) -> float:
    """Where a failure with no error is drawn: above every error, and the line at 1 in view."""
    return max(10.0, 3 * float(data["ratio"].max())) if data["ratio"].notna().any() else 10.0


def _title(part: pd.DataFrame, gradients_not_run: bool) -> str:
    """A panel's title: its implementation and pass, and its own count of passes."""
    counts = part["verdict"].value_counts()
    ran = len(part) - counts.get(SKIP, 0)
    passed = counts.get(PASS, 0)
    title = f"{part['implementation'].iloc[0]}, {part['pass'].iloc[0]}: "
    if ran == 0:
        title += "no case ran"
    else:
        title += f"{passed} of {ran} cases pass" + (" — it fails every case" if not passed else
                                                    f" — {ran - passed} fail" if passed < ran else "")
    if counts.get(SKIP, 0):
        title += f"; {counts[SKIP]} skipped"
    return title + ("; gradients not run" if gradients_not_run else "")


def _panels(data: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The rows drawn, each with its panel's title: the kernel's first, then each contender's, each
    implementation's forward then its gradients. A gradients panel whose every case was skipped
    (an implementation without a backward) is left out, and its forward's title says so."""
    kernel_first = data.sort_values("impl", key=lambda s: s != contract.TRITON, kind="stable")
    kept, titles = [], {}
    for impl in dict.fromkeys(kernel_first["impl"]):
        mine = data[data["impl"] == impl]
        gradients = mine[mine["direction"] == contract.BACKWARD]
        not_run = len(gradients) > 0 and gradients["verdict"].eq(SKIP).all()
        for direction in PASSES:
            part = mine[mine["direction"] == direction]
            if part.empty or (direction == contract.BACKWARD and not_run):
                continue
            title = _title(part, not_run and direction == contract.FORWARD)
            kept.append(part.assign(panel=title))
            titles[title] = len(titles)
    return pd.concat(kept).sort_values(["position"], kind="stable").reset_index(drop=True), list(titles)


def correctness(rows: pd.DataFrame, machine: str):
    """Each implementation's error over its own tolerance per case, a panel per implementation and
    pass, the pass line at 1.

    Every case of the table is on the x axis, both dtypes; a case an implementation skipped is a
    gray band in its panel, its reason in the legend. Each panel's title counts its own passes.
    """
    cases = _cases(rows)
    if cases.empty:
        raise ValueError("the correctness table has no rows of direction forward or backward: "
                         "no case to draw")
    data, panels = _panels(cases)
    cases = data.sort_values("position").drop_duplicates("position")["case"].tolist()
    height = 2.6
    # FacetGrid rather than relplot: a panel whose every case was skipped has nothing to draw
    g = sns.FacetGrid(data, row="panel", row_order=panels, height=height,
                      aspect=max(9, 0.36 * len(cases)) / height)
    g.map_dataframe(sns.scatterplot, x="position", y="drawn_at", hue="verdict", style="verdict",
                    hue_order=list(VERDICT_STYLE), style_order=list(VERDICT_STYLE),
                    palette={v: c for v, (c, _) in VERDICT_STYLE.items()},
                    markers={v: m for v, (_, m) in VERDICT_STYLE.items()}, s=45, legend=False)
    reasons = list(dict.fromkeys(data.loc[data["verdict"] == SKIP, "reason"]))
    hatches = dict(zip(reasons, ["", "//", "..", "xx", "\\\\", "++"] * len(reasons), strict=False))
    legend = {v: Line2D([], [], color=c, marker=m, ls="", markersize=7)
              for v, (c, m) in VERDICT_STYLE.items() if v in set(data["verdict"])}
    legend["error = tolerance (the verdict's line)"] = Line2D([], [], color="tab:green", lw=1.2)
    for reason in reasons:
        label = textwrap.fill(f"{contract.SKIPPED}: {reason or 'no reason given'}", 40)
        legend[label] = Patch(facecolor="0.88", edgecolor="0.6", lw=0, hatch=hatches[reason])
    top = _ratio_top(data)
    for title, ax in g.axes_dict.items():
        part = data[data["panel"] == title]
        ax.set(yscale="log", ylim=(RATIO_FLOOR / 2, top * 2))
        ax.axhline(1, color="tab:green", lw=1.2)
        for x, reason in part.loc[part["verdict"] == SKIP, ["position", "reason"]].itertuples(index=False):
            ax.axvspan(x - 0.45, x + 0.45, facecolor="0.88", edgecolor="0.6", lw=0, hatch=hatches[reason],
                       zorder=0)
        ax.set_title(title, fontsize=10)
    g.set(xticks=range(len(cases)), xlim=(-0.6, len(cases) - 0.4))
    g.axes.flat[-1].set_xticklabels(cases, rotation=60, ha="right", fontsize=8)
    g.set_axis_labels("", "error / tolerance\n(log)")
    g.add_legend(legend_data=legend, title="an exact 0 is drawn at the bottom", fontsize=8)
    g.legend.get_title().set_fontsize(8)
    backends = ", ".join(dict.fromkeys(data["backend"].dropna().astype(str))) if "backend" in data else ""
    g.figure.suptitle("Correctness per case, the forward and the gradients: max |error| vs float64 over "
                      "each implementation's own tolerance, max(1e-3, 2 × PyTorch's error) — "
                      f"{machine}" + (f" ({backends})" if backends else ""), y=1.0, va="bottom", fontsize=11)
    return g.figure, data
