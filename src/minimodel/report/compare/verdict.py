"""The parts compared, in the order of their rows, and the verdict over all of them.

A part is a module of this package with
- `NAME`: its rows' `part` (cpu_bytes adds a second, "cpu profiler");
- `READS`: the files it reads of each run (`minimodel.contract`'s names; together they are the
  contract's COMPARED_TABLES and COMPARED_MANIFESTS, which the compare rule waits for and
  `runs.check_run` checks against the run's manifests);
- `TOLERANCES`: the tolerances verdict.json states for it (none for an exact part);
- `compare(run, reference)`: its rows (`rows.COLUMNS`).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from minimodel.report import runs
from minimodel.report.compare import correctness, cpu_bytes, gpu_bytes, inputs, symbolic, timing
from minimodel.report.compare.rows import AGREE, COLUMNS, DISAGREE, NOT_COMPARABLE
from minimodel.report.runs import REFERENCE

PARTS = (symbolic, cpu_bytes, correctness, timing, gpu_bytes, inputs)
NOTHING = "nothing compared"  # the verdict when every part was not comparable: no agreement shown
EXACT = {"exact parts": 0.0}  # the tolerance of every number that must be identical


def compare_runs(run: str | Path, reference: str | Path = REFERENCE) -> tuple[pd.DataFrame, dict]:
    """(the comparison table, the verdict) of `run` against `reference`; a RunError when either is
    not a run, or holds a file that its manifests do not vouch for."""
    shown = {"run": str(Path(run)), "reference": str(Path(reference))}  # as the caller named them
    run, reference = runs.check_run(run, "run"), runs.check_run(reference, "reference")
    table = pd.DataFrame([r for part in PARTS for r in part.compare(run, reference)], columns=COLUMNS)
    counts = {part: g["verdict"].value_counts().to_dict() for part, g in table.groupby("part", sort=False)}
    disagree = table[table["verdict"] == DISAGREE]
    informed = table["part"] == inputs.NAME
    compared = table["verdict"].isin([AGREE, DISAGREE]) & ~informed
    verdict = {
        **shown,
        "verdict": DISAGREE if len(disagree) else AGREE if compared.any() else NOTHING,
        "compared": int(compared.sum()),
        "parts": counts,
        "not_comparable": {part: sorted(set(g["reason"])) for part, g in
                           table[table["verdict"] == NOT_COMPARABLE].groupby("part")},
        "disagreements": disagree[["part", "item", "metric", "reason"]].to_dict("records")[:50],
        "inputs_that_differ": [inputs.line(r) for r in table[informed].to_dict("records")],
        "tolerances": EXACT | {k: v for part in PARTS for k, v in part.TOLERANCES.items()},
    }
    return table, verdict


def summary_text(verdict: dict) -> str:
    """The verdict as the console shows it: counts per part, reasons, each disagreement."""
    lines = [f"{verdict['run']} against {verdict['reference']}: {verdict['verdict']}"]
    if verdict["verdict"] == NOTHING:
        lines.append("  no number could be compared, so nothing says the runs agree: every part below "
                     "is not comparable")
    for part, counts in verdict["parts"].items():
        lines.append(f"  {part}: " + ", ".join(f"{n} {v}" for v, n in counts.items()))
    for part, reasons in verdict["not_comparable"].items():
        lines += [f"  {part} not comparable: {r}" for r in reasons]
    lines += [f"  DISAGREE {d['part']}: {d['item']} {d['metric']} {d['reason']}"
              for d in verdict["disagreements"]]
    return "\n".join(lines)
