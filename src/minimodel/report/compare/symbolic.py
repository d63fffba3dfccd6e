"""symbolic (`symbolic/`): the closed forms and their tables are exact: identical, per pass
(`direction`: a table without the column is all forward), the backward's rows keyed on their dQ
accumulation too."""

from __future__ import annotations

from pathlib import Path

from minimodel.floor import contract
from minimodel.report import runs
from minimodel.report.compare.rows import (
    AGREE,
    DISAGREE,
    NOT_COMPARABLE,
    exact,
    label_direction,
    per_direction,
    row,
)

NAME = "symbolic"
READS = (contract.SYMBOLIC_BYTES, contract.SYMBOLIC_FORMULAS, contract.SYMBOLIC_BACKWARD_FORMULAS,
         contract.SYMBOLIC_LAB_TABLE)
TOLERANCES: dict[str, float] = {}  # exact: verdict.EXACT


def compare(run: Path, ref: Path) -> list[dict]:
    keys = ["scheme", "convention", "N", "d", "B_r", "B_c", "dtype"]
    metrics = ["bytes", "flops", "flops_with_softmax", "intensity", "intensity_with_softmax"]
    a, b = (runs.table(folder, contract.SYMBOLIC_BYTES, keys + metrics) for folder in (run, ref))

    def judge(a, b, direction):
        extra = [] if direction == contract.FORWARD else ["dq_accumulation"]
        return exact(NAME, a, b, keys + extra, metrics, contract.SYMBOLIC_BYTES, label_direction(direction))

    rows = per_direction(NAME, contract.SYMBOLIC_BYTES, a, b, judge)
    for name in READS[1:]:  # the texts: every closed form, and lab 01's table
        a, b = (runs.text(folder, name) for folder in (run, ref))
        if a is None or b is None:
            rows.append(row(NAME, name, "text", None, None, verdict=NOT_COMPARABLE,
                            reason="missing in one run"))
        else:
            rows.append(row(NAME, name, "text", len(a), len(b), 0.0 if a == b else 1.0, 0.0,
                            AGREE if a == b else DISAGREE, "" if a == b else "text differs"))
    return rows
