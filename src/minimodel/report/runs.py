"""What a comparison reads of a run folder, checked before a number of it is trusted; where it may write.

A folder is compared only when it is a run (it has `symbolic/`) and every file the comparison
reads is what the manifests beside it vouch for: the output's bytes and size as its rule wrote
them, the manifest unedited (`minimodel.floor.provenance.reading.run_problems`). The code that made a
run is not asked about: a committed reference run was made by older code, on purpose, and a later
change to this checkout must not break a comparison against it. A table that is vouched for but
lacks a column the comparison needs (made by another version, or cut short) is named with the
column. Each refusal is a `RunError`, one line.

The committed reference runs under the project's `results/reference/` are found from this
package's checkout, not from the current directory, so the command refuses to write into them
wherever it is started.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from minimodel.floor import contract
from minimodel.floor.provenance import project, reading

# What a comparison reads of each run, relative to its results folder (the optional tables where a
# run has them).
OPTIONAL_TABLES = contract.COMPARED_OPTIONAL_TABLES
TABLES, MANIFESTS = contract.COMPARED_TABLES + OPTIONAL_TABLES, contract.COMPARED_MANIFESTS
# Columns that a run made by older code (the committed H200 reference) names otherwise, by table:
# old name -> today's. gpu_bytes called each point's input seed `seed`.
RENAMED_COLUMNS = {contract.GPU_BYTES: {"seed": "input_seed"}}

# This package's checkout, when it runs from one: the project whose committed references are
# guarded and whose H200 run is the default reference.
PROJECT = project.ROOT
REFERENCE = (PROJECT or Path()) / project.REFERENCE / "nvidia-h200"


class RunError(ValueError):
    """A folder that cannot be compared, or written to: one line naming the file and why."""


def committed_references() -> Path:
    """The folder of the committed reference runs: the checkout's, else the current directory's."""
    return ((PROJECT or Path.cwd()) / project.REFERENCE).resolve()


def check_writable(out: str | os.PathLike) -> Path:
    """`out` resolved (`..` and symlinks), or a RunError when it lies in a committed reference, or
    holds a rule's outputs (a `manifest.json`: the comparison a run's rule `compare` made, which
    its manifest vouches for and `verify` would then find damaged)."""
    resolved, committed = Path(out).resolve(), committed_references()
    if project.inside(resolved, committed):
        raise RunError(f"refusing to write into {resolved}: it is inside the committed reference runs "
                       f"({committed}), which are read, never written; pass --out with a folder of its own")
    if (resolved / contract.MANIFEST).exists():
        raise RunError(f"refusing to write into {resolved}: it holds a workflow rule's outputs, which its "
                       "manifest.json vouches for (the run's own comparison, by its rule compare); pass "
                       "--out with a folder of its own")
    return resolved


def check_run(folder: str | os.PathLike, side: str) -> Path:
    """`folder` resolved, after checking that it is a run whose manifests vouch for what is read."""
    resolved = Path(folder).resolve()
    if not (resolved / "symbolic").is_dir():
        raise RunError(f"the {side} {folder} is not a run of this workflow (no symbolic/ in it)")
    read = [name for name in TABLES + MANIFESTS if (resolved / name).exists()]
    problems = reading.run_problems(resolved, read, default_root=PROJECT or ".")
    if problems:
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        raise RunError(f"refusing the {side} {folder}: {problems[0]}{more}; a comparison reads only "
                       f"what the {side}'s own manifests vouch for")
    return resolved


def table(folder: Path, name: str, columns) -> pd.DataFrame | None:
    """A CSV of the run with at least `columns`, a column named as older runs name it read in
    today's name (`RENAMED_COLUMNS`); None when the run has none."""
    path = folder / name
    if not path.exists():
        return None
    try:
        frame = pd.read_csv(path)
    except (OSError, UnicodeDecodeError, ValueError) as err:  # pandas' parser errors are ValueErrors
        raise RunError(f"{path}: cannot be read as a table ({type(err).__name__}: {err})") from None
    frame = frame.rename(columns={old: new for old, new in RENAMED_COLUMNS.get(name, {}).items()
                                  if old in frame.columns and new not in frame.columns})
    missing = [c for c in dict.fromkeys(columns) if c not in frame.columns]
    if missing:
        raise RunError(f"{path}: lacks the column{'s' if len(missing) > 1 else ''} {', '.join(missing)}, "
                       f"which the comparison reads (a table cut short, or from another version?)")
    return frame


def summary(folder: Path, name: str) -> dict:
    """A JSON summary of the run ({} when the run has none)."""
    path = folder / name
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise RunError(f"{path}: cannot be read as JSON ({type(err).__name__}: {err})") from None
    if not isinstance(data, dict):
        raise RunError(f"{path}: is a JSON {type(data).__name__}, where the comparison reads an object")
    return data


def text(folder: Path, name: str) -> str | None:
    """A text file of the run, its whitespace collapsed: the words and numbers are compared, not
    the columns' padding; None when the run has none."""
    path = folder / name
    try:
        return " ".join(path.read_text().split()) if path.exists() else None
    except (OSError, UnicodeDecodeError) as err:
        raise RunError(f"{path}: cannot be read as text ({type(err).__name__}: {err})") from None


def manifests(folder: Path) -> dict[str, dict]:
    """The run's manifests that the comparison reads, by folder (already checked by `check_run`)."""
    return {str(Path(name).parent): reading.load_manifest(folder / name)
            for name in MANIFESTS if (folder / name).exists()}
