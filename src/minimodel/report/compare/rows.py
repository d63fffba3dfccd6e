"""The comparison's rows, and the judgements every part makes with them.

A row is one judged number: `COLUMNS`, its verdict one of `AGREE`, `DISAGREE`, `NOT_COMPARABLE`
(the inputs part says `DIFFERS`, never a failure), its `rule` the way it was judged where a part
has more than one (timing: its band and the samples, the wider band, or the status).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from minimodel.floor import contract
from minimodel.report import runs

COLUMNS = ["part", "item", "metric", "run", "reference", "difference", "tolerance", "verdict", "rule",
           "reason"]
AGREE, DISAGREE, NOT_COMPARABLE, DIFFERS = "agree", "disagree", "not comparable", "differs"


def row(part, item, metric, run, reference, difference=None, tolerance=None, verdict=AGREE, reason="",
        rule=""):
    """One judged number; `rule`: how it was judged, where a part has more than one way (timing)."""
    return dict(zip(COLUMNS, (part, item, metric, run, reference, difference, tolerance, verdict, rule,
                              reason), strict=True))


def words(column: pd.Series) -> pd.Series:
    """A column of words as Python strings, stripped, an empty cell "" (pandas 2's astype(str) spells
    NaN "nan", pandas 3's keeps it NaN: neither is a word)."""
    column = column.astype(object)
    return column.where(column.notna(), "").astype(str).str.strip().astype(object)


def status_differs(run: str, ref: str) -> str:
    """The reason of a status that changed between the runs, naming both."""
    return f"status differs: {run or 'none'} (run) against {ref or 'none'} (reference)"


def relative(a: float, b: float) -> float:
    return 0.0 if a == b else abs(a - b) / max(abs(a), abs(b))


def missing(part: str, name: str, run: pd.DataFrame | None) -> list[dict]:
    """The row saying that table `name` is missing in the run (`run` None) or else the reference."""
    return [row(part, name, "table", None, None, verdict=NOT_COMPARABLE,
                reason=f"{name} missing in the {'run' if run is None else 'reference'}")]


def only_in(part: str, run_keys: set, ref_keys: set, why: str = "the two configs have different grids",
            prefix: str = ""):
    """A row per side holding points the other lacks, counted (`prefix` before the item: the pass)."""
    return [row(part, f"{prefix}{len(keys)} points", "presence", None, None, verdict=NOT_COMPARABLE,
                reason=f"only in the {side}: {why}")
            for side, keys in (("run", run_keys - ref_keys), ("reference", ref_keys - run_keys)) if keys]


def unique(frames: dict[str, pd.DataFrame], keys: list[str], name: str) -> None:
    """Refuse a table in which two rows share a key (`frames`: run and reference by name): a key
    naming two rows would pair every row of one run with every row of the other."""
    for which, frame in frames.items():
        repeated = frame[frame.duplicated(keys, keep=False)]
        if len(repeated):
            raise runs.RunError(f"{name} of the {which}: {len(repeated)} rows share their key "
                                f"({', '.join(keys)}), first {repeated.iloc[0][keys].to_dict()}")


def exact(part: str, run: pd.DataFrame | None, ref: pd.DataFrame | None, keys: list[str],
          metrics: list[str], name: str, prefix: str = "") -> list[dict]:
    """One row per point of a table that must be identical in both runs (`prefix` before each item)."""
    if run is None or ref is None:
        return missing(part, name, run)
    unique({"run": run, "reference": ref}, keys, name)
    run_idx, ref_idx = run.set_index(keys), ref.set_index(keys)
    common = run_idx.index.intersection(ref_idx.index)
    rows = only_in(part, set(run_idx.index), set(ref_idx.index), prefix=prefix)
    # the common rows taken at once, then each by position (a lookup by key per row costs a
    # millisecond: seconds over the symbolic table)
    run_rows, ref_rows = run_idx.loc[common, metrics], ref_idx.loc[common, metrics]
    for i, key in enumerate(common):
        a, b = run_rows.iloc[i], ref_rows.iloc[i]
        diffs = {m: relative(float(a[m]), float(b[m])) for m in metrics
                 if not (pd.isna(a[m]) and pd.isna(b[m]))}
        worst = max(diffs, key=diffs.get) if diffs else metrics[0]
        label = ", ".join(f"{k}={v}" for k, v in zip(keys, key if isinstance(key, tuple) else (key,),
                                                     strict=True))
        same = all(d == 0 for d in diffs.values())
        rows.append(row(part, prefix + label, "all of " + "/".join(metrics), a[worst], b[worst],
                        diffs.get(worst, 0.0), 0.0, AGREE if same else DISAGREE,
                        "" if same else f"{worst} differs"))
    return rows


def device_mismatch(part: str, run: Path, ref: Path, summary: str, measured_key: str,
                    unmeasured: str, different: str) -> list[dict]:
    """The one row saying why a GPU part is not comparable, or [] when both ran on one GPU model.

    A side counts as measured when its summary's `measured_key` is truthy; its GPU is "device".
    The reason is "the run|reference <unmeasured>" when a side's summary says it was not, "the
    run|reference has no <summary>" when a side has none (its stage did not run there, or did
    not finish: a folder copied before the end), else `different` when the GPUs differ.
    """
    devices, absent = [], []
    for folder in (run, ref):
        data = runs.summary(folder, summary)
        absent.append(not (folder / summary).exists())
        devices.append(data.get("device") if data.get(measured_key) else None)
    if None in devices:
        i = devices.index(None)
        side = ("run", "reference")[i]
        reason = (f"the {side} has no {summary}: its stage did not run there, or did not finish" if absent[i]
                  else f"the {side} {unmeasured}")
    elif devices[0] != devices[1]:
        reason = different
    else:
        return []
    return [row(part, "every point", "device", devices[0], devices[1], verdict=NOT_COMPARABLE,
                reason=reason)]


def per_direction(part: str, name: str, run: pd.DataFrame | None, ref: pd.DataFrame | None,
                  judge) -> list[dict]:
    """The rows of `judge(run_rows, ref_rows, direction)` for each pass (`contract.DIRECTIONS`)
    both tables hold, `contract.with_direction`'s columns added (a table without `direction` is
    all forward); a not-comparable row for each pass only one of them holds."""
    if run is None or ref is None:
        return missing(part, name, run)
    run, ref = contract.with_direction(run), contract.with_direction(ref)
    rows = []
    held = set(run["direction"]) | set(ref["direction"])
    for direction in [*contract.DIRECTIONS, *sorted(held - set(contract.DIRECTIONS))]:
        a, b = run[run["direction"] == direction], ref[ref["direction"] == direction]
        if len(a) and len(b):
            rows += judge(a, b, direction)
        elif len(a) or len(b):
            side, other = ("run", "reference") if len(a) else ("reference", "run")
            rows.append(row(part, f"{len(a) or len(b)} {direction} rows", "presence", len(a), len(b),
                            verdict=NOT_COMPARABLE,
                            reason=f"{direction} rows only in the {side}: the {other} has none "
                                   f"(a run made before the backward, or one that did not run them)"))
    return rows


def label_direction(direction: str) -> str:
    """A row's item prefix naming its pass: none for the forward (its items as before the backward)."""
    return "" if direction == contract.FORWARD else f"{direction}: "
