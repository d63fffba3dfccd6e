"""The parts compared, in the order of their rows, and the verdict over all of them.

A part is a module of this package with
- `NAME`: its rows' `part` (cpu_bytes adds a second, "cpu profiler");
- `READS`: the files it reads of each run (`minimodel.floor.contract`'s names; together they are the
  contract's COMPARED_TABLES and COMPARED_MANIFESTS, which the compare rule waits for and
  `runs.check_run` checks against the run's manifests);
- `TOLERANCES`: the tolerances verdict.json states for it (none for an exact part);
- `compare(run, reference)`: its rows (`rows.COLUMNS`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from minimodel.report import runs
from minimodel.report.compare import (
    correctness,
    cpu_bytes,
    decode,
    families,
    gpu_bytes,
    inputs,
    symbolic,
    timing,
)
from minimodel.report.compare.rows import AGREE, COLUMNS, DISAGREE, NOT_COMPARABLE
from minimodel.report.runs import REFERENCE

PARTS = (symbolic, cpu_bytes, correctness, timing, gpu_bytes, decode, inputs)
NOTHING = "nothing compared"  # the verdict when every part was not comparable: no agreement shown
EXACT = {"exact parts": 0.0}  # the tolerance of every number that must be identical
SHOWN = 10  # disagreements the console shows, before "and N more"
WIDTH = 110  # characters of a disagreement's reason the console shows (comparison.csv has them all)


def compare_runs(run: str | Path, reference: str | Path = REFERENCE) -> tuple[pd.DataFrame, dict]:
    """(the comparison table, the verdict) of `run` against `reference`; a RunError when either is
    not a run, or holds a file that its manifests do not vouch for."""
    shown = {"run": str(Path(run)), "reference": str(Path(reference))}  # as the caller named them
    run, reference = runs.check_run(run, "run"), runs.check_run(reference, "reference")
    table = pd.DataFrame([r for part in PARTS for r in part.compare(run, reference)], columns=COLUMNS)
    counts = {part: g["verdict"].value_counts().to_dict() for part, g in table.groupby("part", sort=False)}
    disagree = table[table["verdict"] == DISAGREE]
    disagree = disagree.sort_values("part", key=lambda part: part != families.NAME, kind="stable")
    informed = table["part"] == inputs.NAME
    compared = table["verdict"].isin([AGREE, DISAGREE]) & ~informed
    timed = table[table["part"] == timing.NAME]
    verdict = {
        **shown,
        "verdict": DISAGREE if len(disagree) else AGREE if compared.any() else NOTHING,
        "families": [families.line(r) for r in table[table["part"] == families.NAME].to_dict("records")],
        "compared": int(compared.sum()),
        "parts": counts,
        "timing_rules": {str(k): int(n) for k, n in timed.loc[timed["rule"] != "", "rule"]
                         .value_counts().items()},
        "not_comparable": {part: sorted(set(g["reason"])) for part, g in
                           table[table["verdict"] == NOT_COMPARABLE].groupby("part")},
        "disagreements": disagree[["part", "item", "metric", "reason"]].to_dict("records")[:50],
        "inputs_that_differ": [inputs.line(r) for r in table[informed].to_dict("records")],
        "code_that_differs": sorted(set(table.loc[informed & (table["metric"] == inputs.CODE), "run"])),
        "commits": {"run": inputs.commits(run), "reference": inputs.commits(reference)},
        "tolerances": EXACT | {k: v for part in PARTS for k, v in part.TOLERANCES.items()},
    }
    return table, verdict


def code_note(verdict: dict) -> str | None:
    """Where a run that disagrees ran other code than the reference: that a disagreement may be the
    code's, and which commit made the reference (None where the code is the same, or it agrees)."""
    files = verdict.get("code_that_differs") or []
    if verdict["verdict"] != DISAGREE or not files:
        return None
    made = ", ".join(c[:7] for c in verdict.get("commits", {}).get("reference") or []) or "unrecorded"
    named = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    return (f"the run's code differs from the reference's in {len(files)} file{'s' * (len(files) != 1)} "
            f"({named}): a disagreement can be that change, not the machine. The reference was made by "
            f"commit {made}; docs/reproducing.md says how to run its code")


def summary_text(verdict: dict) -> str:
    """The verdict as the console shows it, in a few lines: the families' verdict first, counts per
    part, the rules that judged the timing, reasons, the first disagreements; every row is in
    comparison.csv."""
    lines = [f"{verdict['run']} against {verdict['reference']}: {verdict['verdict']}"]
    if verdict["verdict"] == NOTHING:
        lines.append("  no number could be compared, so nothing says the runs agree: every part below "
                     "is not comparable")
    parts = dict(verdict["parts"])
    if families.NAME in parts:  # read first: a family moves less than its points
        lines.append(f"  {families.NAME} (geometric mean per pass, grid, d and ratio): "
                     + ", ".join(f"{n} {v}" for v, n in parts.pop(families.NAME).items()))
    for part, counts in parts.items():
        said = ", ".join(f"{n} {v}" for v, n in counts.items())
        if part == inputs.NAME:
            said += (": code, parameters or environment that changed between the two runs, expected "
                     "between runs and never a failure, listed so that a moved number can be traced")
        lines.append(f"  {part}: {said}")
    if verdict.get("timing_rules"):
        lines.append("  timing judged by: " + ", ".join(f"{n} {rule}" for rule, n in verdict["timing_rules"]
                                                         .items()))
    for part, reasons in verdict["not_comparable"].items():
        lines += [f"  {part} not comparable: {r}" for r in reasons[:3]]
        if len(reasons) > 3:
            lines.append(f"  {part} not comparable: and {len(reasons) - 3} more reasons")
    if note := code_note(verdict):
        lines.append(f"  {note}")
    shown = verdict["disagreements"][:SHOWN]
    lines += [f"  DISAGREE {d['part']}: {d['metric']}, {d['item']}: {shorter(d['reason'])}" for d in shown]
    more = sum(n.get(DISAGREE, 0) for n in verdict["parts"].values()) - len(shown)
    if more > 0:
        lines.append(f"  and {more} more disagreements: every row is in comparison.csv")
    return "\n".join(lines)


def shorter(text: str) -> str:
    return text if len(text) <= WIDTH else text[:WIDTH - 3].rstrip() + "..."


def gate(path: str | Path, fail: bool) -> tuple[bool, str]:
    """(whether the run passes, what to say) for the verdict.json at `path`: a verdict other than
    agree fails it when `fail` (the config's compare.fail_on_disagree)."""
    verdict = json.loads(Path(path).read_text())
    folder = Path(path).parent
    said = (f"compare: {verdict['verdict']} ({verdict['run']} against {verdict['reference']}); "
            f"{folder} holds comparison.csv (every row), verdict.json and comparison.png")
    if verdict["verdict"] == AGREE:
        return True, said
    if not fail:
        return True, said + "; compare.fail_on_disagree is false, so the run does not fail on it"
    count = sum(n.get(DISAGREE, 0) for n in verdict["parts"].values())
    first = "; ".join(f"{d['metric']}, {d['item']}" for d in verdict["disagreements"][:3])
    named = f"{count} disagreement{'s' * (count != 1)}{', the first three' if count > 3 else ''}: {first}"
    why = named if count else "no number could be compared"
    note = code_note(verdict)
    return False, (f"{said}; {why}. {note + '. ' if note else ''}The run fails on it: "
                   "compare.fail_on_disagree: false in the config keeps its exit status 0")
