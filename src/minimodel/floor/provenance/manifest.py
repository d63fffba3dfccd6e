"""Provenance for every workflow output: `manifest.json`, the checks before a stage reads, and `verify`.

Each rule's script runs inside `stage(snakemake)`. When the script finishes, the stage writes
the rule's `manifest.json` beside its outputs, recording:
- every output: path, sha256, size;
- every input: the data files, the script, and every module of `minimodel` the rule's code
  depends on (`code.code_closure`, the list the workflow also gives Snakemake), each with its
  sha256;
- the rule, its command, its parameters (the config values it used), the environment
  (`minimodel.floor.provenance.machine.environment`: software, CPU, GPU, host, SLURM job), the git
  commit with a dirty flag, and the start and end times.

Each manifest also records its own path and a sha256 of its own content (`manifest_sha256`),
so an edited manifest, the run-level one under `verify/` included, is detected.

`python -m minimodel verify results/` (`minimodel.floor.provenance.verify`) re-hashes everything the
manifests under the folder record, and tells damage (a file of the run whose bytes changed, or a
missing one: exit 1) from staleness (code or another input from outside the run changed since:
exit 0, 1 with `--strict`). It checks bytes and code, not whether the config changed: Snakemake
decides what its parameters re-run.

Before a stage reads an input that another rule made, `stage()` checks it against that rule's
manifest (the nearest `manifest.json` at or above the input's folder) and refuses a tampered or
stale input, naming it and the rule that made it. It then removes that manifest, which no
longer vouches for its outputs, so the next `snakemake` re-runs the rule that owns it.

Outputs are written through `minimodel.floor.provenance.io`: complete or not at all. Reading a
manifest (its shape, its own hash) and the check of one manifest are in
`minimodel.floor.provenance.reading`; a rule's code, and the commit it came from, in
`minimodel.floor.provenance.code`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from minimodel.floor.provenance import console
from minimodel.floor.provenance.code import check_code_tree, git_state, imported_modules
from minimodel.floor.provenance.io import remove_stale_temporaries, sha256_file, write_json
from minimodel.floor.provenance.machine import NoUsableGPU, environment
from minimodel.floor.provenance.project import ConfigTooLarge, inside
from minimodel.floor.provenance.reading import (
    MANIFEST_NAME,
    SELF_HASH,
    ProvenanceError,
    _rel,
    content_hash,
    load_manifest,
    locate,
    manifest_root,
    verify_manifest,
)

log = logging.getLogger(__name__)


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _entry(path: str | os.PathLike, root: Path, kind: str) -> dict:
    p = Path(path)
    return {"path": _rel(p, root), "kind": kind, "sha256": sha256_file(p), "size": p.stat().st_size}


def _plain(value):
    """Snakemake's Namedlist/params and numpy scalars as JSON-ready values."""
    if hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        return value.item()
    return value


def build_manifest(*, rule: str, command: str, outputs, inputs, script, params: dict,
                   started: str, root: str | os.PathLike = ".", extra: dict | None = None,
                   path: str | os.PathLike | None = None, modules=None) -> dict:
    """The manifest of one rule's run. `modules`: the package files it depends on (the rule's code
    inputs); by default the modules loaded in this process."""
    root = Path(root).resolve()
    in_entries = [_entry(p, root, "data") for p in inputs]
    if script is not None:
        in_entries.append(_entry(script, root, "script"))
    modules = imported_modules() if modules is None else modules
    in_entries += [_entry(p, root, "module") for p in modules]
    manifest = {
        "manifest": _rel(path, root) if path is not None else None,
        "rule": rule,
        "command": command,
        "params": _plain(params),
        "outputs": [_entry(p, root, "output") for p in outputs],
        "inputs": in_entries,
        "environment": environment(),
        "git": git_state(root),
        "started": started,
        "finished": _now(),
        **({"extra": _plain(extra)} if extra else {}),
    }
    manifest[SELF_HASH] = content_hash(manifest)
    return manifest


class Stage:
    """What a script inside `stage()` may add to its manifest (`stage.extra[...] = ...`), and
    `stage.progress`, a stream for progress bars and the stage's console lines that reaches both
    the rule's log and the terminal, as whole lines (`console.Progress`; the stage sends stderr to
    the log)."""

    def __init__(self, progress=None):
        self.extra: dict = {}
        self.progress = progress


@contextlib.contextmanager
def stage(smk, root: str | os.PathLike = ".", checks_itself: tuple[str, ...] = ()) -> Iterator[Stage]:
    """Run a rule's script body, log to the rule's log, then write its manifest.

    The rule must name its manifest output `manifest`; its script is `scripts/<rule>.py`.
    Before the body runs, the stage checks that the code is this checkout's, removes what a
    killed run left half-written, and checks every input that another rule made against that
    rule's manifest (`check_inputs`), but those of the input groups `checks_itself` names (the
    manifests that rule `verify` checks). The manifest is written only when the body succeeds, and
    last, so a manifest present means every output beside it is complete.
    """
    started = _now()
    log_path = smk.log[0] if len(smk.log) else os.devnull
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    terminal = sys.stderr
    with (open(log_path, "a") as log_fh, contextlib.redirect_stderr(log_fh),
          console.rule_log(smk.log[0] if len(smk.log) else None)):
        current = Stage(progress=console.Progress(log_fh, terminal))
        handler = logging.StreamHandler(log_fh)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        root_logger = logging.getLogger()
        root_logger.addHandler(handler)
        root_logger.setLevel(logging.INFO)
        try:
            check_code_tree(root)
            for path in [*smk.output, *smk.log]:
                for tmp in remove_stale_temporaries(path):
                    log.info("removed %s, left by an interrupted run", tmp)
            results = getattr(smk, "config", {}).get("results_dir")
            own = set().union(*(_group(smk, name) for name in checks_itself))
            check_inputs([p for p in _data_inputs(smk, exempt=True) if p not in own], root, results,
                         _group(smk, "reference"))
            yield current
            script = Path(root) / "scripts" / f"{smk.rule}.py"
            modules = _code_modules(smk, script)
            manifest_path = Path(smk.output.manifest)
            outputs = [p for p in smk.output if Path(p) != manifest_path]
            write_json(manifest_path, build_manifest(
                rule=smk.rule,
                command=f"snakemake (rule {smk.rule}): python {script.as_posix()}",
                outputs=outputs, inputs=_data_inputs(smk),
                script=script if script.exists() else None,
                params=dict(smk.params.items()), started=started, root=root,
                extra=current.extra, path=manifest_path, modules=modules,
            ))
        except (ProvenanceError, ConfigTooLarge, NoUsableGPU) as err:
            log.error("rule %s refused to run: %s", smk.rule, err)
            raise SystemExit(f"rule {smk.rule}: {err}") from None
        except BaseException:
            log.exception("rule %s failed", smk.rule)
            raise
        finally:
            root_logger.removeHandler(handler)


def _code_modules(smk, script: Path) -> list[Path] | None:
    """The rule's `code` inputs less its script, after checking that they hold every module of
    the package this process imported (None for a rule without a code group)."""
    code = _group(smk, "code")
    if not code:
        return None
    listed = {Path(p).resolve() for p in code}
    missing = [m for m in imported_modules() if m not in listed]
    if missing:
        raise ProvenanceError(f"rule {smk.rule} imported {', '.join(map(str, missing))}, which its "
                              "code inputs (code_closure) do not list")
    return sorted(Path(p) for p in code if Path(p).resolve() != script.resolve())


def _group(smk, name: str) -> set[str]:
    """The paths of the rule's input group `name` (a single path or a list of them)."""
    if name not in smk.input.keys():
        return set()
    paths = getattr(smk.input, name)
    return {paths} if isinstance(paths, str) else set(paths)


def _data_inputs(smk, exempt: bool = False) -> list[str]:
    """The rule's inputs less its `code` group, which the manifest records as modules, and its
    `after` group: outputs of a rule it only runs after, which it does not read (gpu_timing
    after gpu_warm): nothing of it was made from them.

    With `exempt`, also less its `benchmarks` group: Snakemake writes those tables itself, after
    a rule's manifest, so no manifest vouches for them.
    """
    skip = _group(smk, "code") | _group(smk, "after") | (_group(smk, "benchmarks") if exempt else set())
    return [p for p in smk.input if p not in skip]


def owning_manifest(path: str | os.PathLike, root: str | os.PathLike = ".") -> Path | None:
    """The nearest manifest.json at or above `path`'s folder, up to `root`: the rule that made it."""
    root = Path(root).resolve()
    folder = Path(path).resolve().parent
    for candidate in (folder, *folder.parents):
        if (candidate / MANIFEST_NAME).is_file():
            return candidate / MANIFEST_NAME
        if candidate == root:
            break
    return None


def check_inputs(paths, root: str | os.PathLike = ".",
                 results_dir: str | os.PathLike | None = None, outputs_only=()) -> None:
    """Refuse any input that another rule made unless that rule's manifest vouches for it.

    An input under `results_dir` must have a manifest above it; elsewhere, an input without one
    is a source file (a template) and is taken as it is. A manifest given as an input is checked
    whole. Paths in `outputs_only` (another run read for comparison) must be what their rule
    wrote; whether that rule's code has changed since is not asked.
    A manifest that cannot be read, or whose outputs or inputs changed, is removed after the
    refusal: it vouches for nothing, and without it the next run re-makes what it covered.
    """
    verified: dict[tuple[Path, bool], list[str]] = {}  # one check per manifest, however many inputs
    places = [Path(root).resolve()] + ([Path(results_dir).resolve()] if results_dir is not None else [])
    for path in paths:
        if path not in outputs_only and not any(inside(Path(path).resolve(), p) for p in places):
            continue  # a source outside the project and the run (a contender's module): a
            # manifest.json above it is none of this workflow's, and must not be removed
        owner = Path(path) if Path(path).name == MANIFEST_NAME else owning_manifest(path, root)
        if owner is None:
            resolved = Path(path).resolve()
            if results_dir is not None and Path(results_dir).resolve() in resolved.parents:
                raise ProvenanceError(f"no manifest vouches for input {path}: its rule has not run since, "
                                      "or a job refused it and removed its manifest; run `snakemake` again")
            continue
        other_run = path in outputs_only
        try:
            manifest = load_manifest(owner)
        except ProvenanceError as err:
            if other_run:
                raise ProvenanceError(f"cannot check input {path} of another run: {err}") from None
            owner.unlink(missing_ok=True)
            raise ProvenanceError(f"cannot check input {path}: {err}. The manifest was removed: run "
                                  "`snakemake` again, and it re-runs the rule that writes it") from None
        rel = _rel(path, manifest_root(owner, manifest, root))
        # a run folder copied or moved since (a rerun of one stage in a copy): its recorded paths
        # are read where the run lies now
        run = (Path(results_dir).resolve() if results_dir is not None
               and inside(owner.resolve(), Path(results_dir).resolve()) else None)
        base = manifest_root(owner, manifest, root)
        where = (locate(run, owner.resolve(), manifest, Path(root).resolve()) if run is not None
                 else base.joinpath)
        if owner != Path(path) and not any(where(entry["path"]).resolve() == Path(path).resolve()
                                           for entry in manifest["outputs"]):
            raise ProvenanceError(f"input {rel} is not among the outputs that rule "
                                  f"{manifest['rule']} recorded in {owner}")
        if (owner, other_run) not in verified:
            verified[owner, other_run] = list(dict.fromkeys(
                verify_manifest(owner, root, outputs_only=other_run, run=run)))
        problems = verified[owner, other_run]
        if problems and other_run:
            raise ProvenanceError(f"refusing input {rel} of another run, made by rule {manifest['rule']}: "
                                  + "; ".join(problems))
        if problems:
            owner.unlink(missing_ok=True)
            raise ProvenanceError(
                f"refusing input {rel}, made by rule {manifest['rule']}: " + "; ".join(problems)
                + f". Its manifest {owner} was removed: run `snakemake` again, and it re-runs rule "
                f"{manifest['rule']}, then what reads its outputs")
