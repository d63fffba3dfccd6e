"""Reading manifests: their shape, their own hash, and whether a run folder holds what they vouch for.

`load_manifest` is the one reader: a file that is not JSON, or JSON of another shape (say
`"outputs": [1, 2]`), is a ProvenanceError naming the file and what is wrong, never a traceback
further on. `verify_manifest` is the check a stage makes of the rule that made its input.
`run_problems` checks the outputs of a run folder against the manifests beside them, wherever
that folder now lies: a run is compared after being copied or moved, and a committed reference
run was made by older code, so only the bytes are asked about, not the code. `locate` finds
where a recorded path lies now. `python -m minimodel verify` is `minimodel.floor.provenance.verify`.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path, PurePosixPath

from minimodel.floor import contract
from minimodel.floor.provenance.io import sha256_file

MANIFEST_NAME = "manifest.json"
SELF_HASH = "manifest_sha256"
# What a reader of a manifest relies on: the keys, and the keys of each entry of its two lists.
ENTRY_KEYS = {"outputs": ("path", "sha256"), "inputs": ("path", "kind", "sha256")}


class ProvenanceError(RuntimeError):
    """An input that its manifest does not vouch for, or a manifest that cannot be read."""


def content_hash(manifest: dict) -> str:
    """sha256 of a manifest's content, its own hash left out (key order and spacing do not count)."""
    body = {k: v for k, v in manifest.items() if k != SELF_HASH}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def self_hash_problem(manifest: dict) -> str | None:
    """Whether a manifest was edited since it was written (its content against its own hash)."""
    if SELF_HASH in manifest and content_hash(manifest) != manifest[SELF_HASH]:
        return f"the manifest was edited after rule {manifest['rule']} wrote it"
    if SELF_HASH not in manifest and "manifest" in manifest:
        return "the manifest lacks its own hash"
    return None  # a hash that matches, or a manifest older than self-hashes


def shape_problem(manifest) -> str | None:
    """What keeps parsed JSON from being a manifest, in a few words; None when it is one."""
    if not isinstance(manifest, dict):
        return f"it is a JSON {type(manifest).__name__}, not an object"
    missing = [k for k in ("rule", *ENTRY_KEYS) if k not in manifest]
    if missing:
        return f"it lacks {', '.join(missing)} (a manifest has rule, outputs and inputs)"
    if not isinstance(manifest["rule"], str):
        return f"rule is {manifest['rule']!r}, not a string"
    for key, needed in ENTRY_KEYS.items():
        if not isinstance(manifest[key], list):
            return f"{key} is {manifest[key]!r:.60}, not a list"
        for i, entry in enumerate(manifest[key]):
            if not (isinstance(entry, dict) and all(isinstance(entry.get(k), str) for k in needed)):
                return f"{key}[{i}] is {entry!r:.60}, not an object with {', '.join(needed)} as strings"
    if not isinstance(manifest.get("manifest") or "", str):
        return f"manifest (its own path) is {manifest['manifest']!r:.60}, not a string"
    if not isinstance(manifest.get("environment", {}), dict):
        return "environment is not an object"
    return None


def load_manifest(path: str | os.PathLike) -> dict:
    """A manifest's content, or a ProvenanceError naming the file when it cannot be one."""
    try:
        manifest = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ProvenanceError(f"{path} is not a readable manifest ({type(err).__name__}: {err})") from None
    if problem := shape_problem(manifest):
        raise ProvenanceError(f"{path} is not a manifest: {problem}")
    return manifest


def manifest_root(path: str | os.PathLike, manifest: dict, default: str | os.PathLike = ".") -> Path:
    """The folder a manifest's paths are relative to, found from the path it records for itself.

    So a run is verified from any directory, and in a moved or copied checkout. A manifest
    without that record (older runs) is read against `default`.
    """
    recorded = Path(manifest.get("manifest") or "")
    here = Path(path).resolve()
    parts = recorded.parts
    if parts and not recorded.is_absolute() and here.parts[-len(parts):] == parts:
        return Path(*here.parts[:-len(parts)])
    return Path(default).resolve()


def _rel(path: str | os.PathLike, root: Path) -> str:
    p = Path(path).resolve()
    try:
        return p.relative_to(root).as_posix()
    except ValueError:
        return p.as_posix()


def find_manifests(folder: str | os.PathLike) -> list[Path]:
    """Every manifest of the run in `folder`; the committed reference runs under its `reference/`
    are runs of their own (`verify results/reference/<machine>` checks one)."""
    folder = Path(folder)
    return sorted(p for p in folder.rglob(MANIFEST_NAME)
                  if "reference" not in p.relative_to(folder).parts[:-1])


def verify_manifest(manifest_path: str | os.PathLike, root: str | os.PathLike | None = None,
                    outputs_only: bool = False, run: str | os.PathLike | None = None) -> list[str]:
    """Problems with one manifest: its own content, each changed or missing output, each changed input.

    `outputs_only` leaves the inputs out: whether the outputs are still what the rule wrote, not
    whether they are stale (a committed reference run was made by older code, on purpose).
    `run`: the run folder the manifest lies in now, which may be a copy or a move of the one it
    recorded (`locate`).
    """
    try:
        manifest = load_manifest(manifest_path)
    except ProvenanceError as err:
        return [str(err)]
    if run is not None:
        here = Path(manifest_path).resolve()
        return _problems(manifest, locate(Path(run).resolve(), here, manifest, Path(root or ".").resolve()),
                         outputs_only)
    return _problems(manifest, manifest_root(manifest_path, manifest, root or ".").joinpath, outputs_only)


def _problems(manifest: dict, where, outputs_only: bool) -> list[str]:
    problems = [edited] if (edited := self_hash_problem(manifest)) else []
    changed_inputs = []
    for entry in [] if outputs_only else manifest["inputs"]:
        p = where(entry["path"])
        if not p.exists():
            changed_inputs.append(f"{entry['path']} ({entry['kind']}, missing)")
        elif sha256_file(p) != entry["sha256"]:
            changed_inputs.append(f"{entry['path']} ({entry['kind']}, changed)")
    for entry in manifest["outputs"]:
        p = where(entry["path"])
        if not p.exists():
            problems.append(f"{entry['path']}: output missing")
            continue
        if sha256_file(p) != entry["sha256"]:
            problems.append(f"{entry['path']}: output bytes changed since rule "
                            f"{manifest['rule']} wrote it")
        for changed in changed_inputs:
            problems.append(f"{entry['path']}: made from an input that changed: {changed}")
    return problems


def depth_in_run(manifest: dict, here: Path) -> int | None:
    """How many trailing parts of a manifest's path lie inside its run folder, by the folder its
    rule writes in a run (`contract.FOLDERS`): `gpu/timing/manifest.json` is 3. None when the rule
    is not the workflow's, or when the path the manifest records for itself, or the path it lies
    at now, does not end in that folder (a run of another layout)."""
    folder = contract.FOLDERS.get(manifest["rule"])
    if folder is None or not manifest.get("manifest"):
        return None
    layout = (*PurePosixPath(folder).parts, MANIFEST_NAME)
    recorded, now = PurePosixPath(manifest["manifest"]).parts, here.parts
    if len(recorded) < len(layout) or len(now) < len(layout):
        return None
    tail = now[-len(layout):]
    fits = all(want.startswith("{") or want == got for want, got in zip(layout, tail, strict=True))
    return len(layout) if fits and recorded[-len(layout):] == tail else None


def locate(folder: Path, manifest_path: Path, manifest: dict, default: Path):
    """A function from a path the manifest records to where that file lies now.

    The manifest records its own path as `<run>/<sub>/manifest.json`, and `<sub>` is the folder its
    rule writes in a run (`depth_in_run`); the run may since have been copied or moved anywhere,
    into another run folder's `reruns/` included, so a recorded `<run>/<x>` is read at `<x>` of
    the folder the manifest lies in now, less `<sub>`. A manifest of a rule the layout does not
    know lies in the run folder `folder`. Recorded paths outside `<run>` (code, a reference run)
    are read from the checkout (`manifest_root`).
    """
    recorded = PurePosixPath(manifest.get("manifest") or "")
    root = manifest_root(manifest_path, manifest, default)
    depth = depth_in_run(manifest, manifest_path)
    if depth is None and manifest_path.is_relative_to(folder):
        inside = manifest_path.relative_to(folder).parts
        if len(recorded.parts) >= len(inside) and recorded.parts[-len(inside):] == inside:
            depth = len(inside)
    if depth is None:
        return lambda p: root / p  # no record of its own path (older runs): as `verify` reads it
    run, now = recorded.parts[:-depth], Path(*manifest_path.parts[:-depth])

    def where(p: str) -> Path:
        parts = PurePosixPath(p).parts
        return now.joinpath(*parts[len(run):]) if parts[:len(run)] == run else root / p
    return where


def owner_in_run(path: Path, folder: Path) -> Path | None:
    """The manifest that vouches for `path`: itself, or the nearest one above it inside the run."""
    if path.name == MANIFEST_NAME:
        return path
    return next((d / MANIFEST_NAME for d in path.parents
                 if d.is_relative_to(folder) and (d / MANIFEST_NAME).is_file()), None)


def run_problems(folder: str | os.PathLike, paths, default_root: str | os.PathLike = ".") -> list[str]:
    """Problems with the files `paths` (relative to the run folder `folder`) that a reader takes
    from a run: each must be a manifest, or an output of the nearest manifest above it in the
    run, and each such manifest must be unedited, with every output's bytes as it recorded them.
    """
    folder = Path(folder).resolve()
    checked: dict[Path, set[Path]] = {}  # manifest -> where its outputs lie now
    problems = []
    for name in paths:
        path = folder / name
        owner = owner_in_run(path, folder)
        if owner is None:
            problems.append(f"{name}: no manifest in the run vouches for it (its rule never completed)")
            continue
        if owner not in checked:
            checked[owner] = set()
            try:
                manifest = load_manifest(owner)
            except ProvenanceError as err:
                problems.append(str(err))
                continue
            rel = owner.relative_to(folder).as_posix()
            if edited := self_hash_problem(manifest):
                problems.append(f"{rel}: {edited}")
            where = locate(folder, owner, manifest, Path(default_root))
            for entry in manifest["outputs"]:
                now = where(entry["path"])
                checked[owner].add(now)
                shown = now.relative_to(folder) if now.is_relative_to(folder) else now
                if not now.is_file():
                    problems.append(f"{shown}: missing, though {rel} records it as an output")
                elif (now.stat().st_size != entry.get("size", now.stat().st_size)
                      or sha256_file(now) != entry["sha256"]):
                    problems.append(f"{shown}: bytes changed since rule {manifest['rule']} wrote it")
        if owner != path and checked[owner] and path not in checked[owner]:
            problems.append(f"{name}: not among the outputs that {owner.relative_to(folder)} records")
    return problems
