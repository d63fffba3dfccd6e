"""Provenance for every workflow output: atomic writes, `manifest.json`, and `verify`.

Each rule's script runs inside `stage(snakemake)`. When the script finishes, the stage writes
the rule's `manifest.json` beside its outputs, recording:
- every output: path, sha256, size;
- every input: the data files, the script, and every module of `minimodel` the script imported
  (read off `sys.modules`, so nothing is listed by hand), each with its sha256;
- the rule, its command, its parameters (the config values it used), the environment
  (Python, torch, triton, snakemake, the device), the git commit with a dirty flag,
  and the start and end times.

`python -m minimodel.manifest verify results/` re-hashes everything under the folder and exits
non-zero naming each output whose bytes changed, or whose inputs changed since it was made.

Outputs are written through `atomic_write`: a temporary file in the same folder, renamed into
place only once complete, so an interrupted run leaves no half-written file behind.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import importlib.metadata
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

MANIFEST_NAME = "manifest.json"
PACKAGE = "minimodel"

log = logging.getLogger(__name__)


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", **kwargs) -> Iterator:
    """Open a temporary file next to `path`; on success it replaces `path` in one rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, **kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json(path: str | os.PathLike, obj) -> None:
    with atomic_write(path) as fh:
        json.dump(obj, fh, indent=2, sort_keys=False, default=str)
        fh.write("\n")


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_write(path) as fh:
        fh.write(text)


def write_csv(path: str | os.PathLike, frame) -> None:
    with atomic_write(path, newline="") as fh:
        frame.to_csv(fh, index=False)


def save_figure(path: str | os.PathLike, fig, **kwargs) -> None:
    with atomic_write(path, "wb") as fh:
        fig.savefig(fh, format=Path(path).suffix.lstrip(".") or "png", **kwargs)


def imported_modules() -> list[Path]:
    """Source files of every `minimodel` module loaded in this process."""
    files = set()
    for name, module in list(sys.modules.items()):
        if name == PACKAGE or name.startswith(PACKAGE + "."):
            file = getattr(module, "__file__", None)
            if file and file.endswith(".py"):
                files.add(Path(file).resolve())
    return sorted(files)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_description() -> str:
    """The CPU model and core count of this machine."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return f"cpu: {cpu} ({os.cpu_count()} cores)"


def device_description() -> str:
    """The accelerator that torch sees, or the CPU when there is none."""
    try:
        import torch

        if torch.cuda.is_available():
            return f"cuda: {torch.cuda.get_device_name(0)}"
    except ImportError:
        pass
    return cpu_description()


def environment() -> dict:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": _version("torch"),
        "triton": _version("triton"),
        "snakemake": _version("snakemake"),
        "numpy": _version("numpy"),
        "device": device_description(),
        "cpu": cpu_description(),
        "triton_interpret": os.environ.get("TRITON_INTERPRET", "0") == "1",
    }


def git_state(root: str | os.PathLike = ".") -> dict:
    """The commit the code came from, and whether tracked files differ from it.

    MINIMODEL_GIT_COMMIT, when set, names the commit and wins over the tree's own .git: a copy
    of the tree sent to a cluster node or a lent GPU may carry none, or a stale one. What that
    .git says is kept beside it under "checkout".
    """
    def git(*args):
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              check=True).stdout.strip()
    try:
        found = {"commit": git("rev-parse", "HEAD"),
                 "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}
    except (OSError, subprocess.CalledProcessError):
        found = {"commit": None, "dirty": None}
    if os.environ.get("MINIMODEL_GIT_COMMIT"):
        return {"commit": os.environ["MINIMODEL_GIT_COMMIT"], "dirty": None,
                "source": "MINIMODEL_GIT_COMMIT", "checkout": found}
    return found


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _rel(path: str | os.PathLike, root: Path) -> str:
    p = Path(path).resolve()
    try:
        return p.relative_to(root).as_posix()
    except ValueError:
        return p.as_posix()


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
                   started: str, root: str | os.PathLike = ".", extra: dict | None = None) -> dict:
    root = Path(root).resolve()
    in_entries = [_entry(p, root, "data") for p in inputs]
    if script is not None:
        in_entries.append(_entry(script, root, "script"))
    in_entries += [_entry(p, root, "module") for p in imported_modules()]
    return {
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


class Stage:
    """What a script inside `stage()` may add to its manifest (`stage.extra[...] = ...`)."""

    def __init__(self):
        self.extra: dict = {}


@contextlib.contextmanager
def stage(smk, root: str | os.PathLike = ".") -> Iterator[Stage]:
    """Run a rule's script body, log to the rule's log, then write its manifest.

    The rule must name its manifest output `manifest`; its script is `scripts/<rule>.py`.
    The manifest is written only when the body succeeds, and last, so a manifest present
    means every output beside it is complete.
    """
    started = _now()
    current = Stage()
    log_path = smk.log[0] if len(smk.log) else os.devnull
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a") as log_fh, contextlib.redirect_stderr(log_fh):
        handler = logging.StreamHandler(log_fh)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        root_logger = logging.getLogger()
        root_logger.addHandler(handler)
        root_logger.setLevel(logging.INFO)
        try:
            yield current
            script = Path(root) / "scripts" / f"{smk.rule}.py"
            manifest_path = Path(smk.output.manifest)
            outputs = [p for p in smk.output if Path(p) != manifest_path]
            write_json(manifest_path, build_manifest(
                rule=smk.rule,
                command=f"snakemake (rule {smk.rule}): python {script.as_posix()}",
                outputs=outputs, inputs=_data_inputs(smk),
                script=script if script.exists() else None,
                params=dict(smk.params.items()), started=started, root=root,
                extra=current.extra,
            ))
        except BaseException:
            log.exception("rule %s failed", smk.rule)
            raise
        finally:
            root_logger.removeHandler(handler)


def _data_inputs(smk) -> list[str]:
    """The rule's inputs less its `code` group: code is recorded from what was really imported."""
    code = set(getattr(smk.input, "code", []) if "code" in smk.input.keys() else [])
    return [p for p in smk.input if p not in code]


def find_manifests(folder: str | os.PathLike) -> list[Path]:
    return sorted(Path(folder).rglob(MANIFEST_NAME))


def verify_manifest(manifest_path: str | os.PathLike, root: str | os.PathLike = ".") -> list[str]:
    """Problems with one manifest: each changed or missing output, each changed input."""
    root = Path(root)
    manifest = json.loads(Path(manifest_path).read_text())
    problems = []
    changed_inputs = []
    for entry in manifest["inputs"]:
        p = root / entry["path"]
        if not p.exists():
            changed_inputs.append(f"{entry['path']} ({entry['kind']}, missing)")
        elif sha256_file(p) != entry["sha256"]:
            changed_inputs.append(f"{entry['path']} ({entry['kind']}, changed)")
    for entry in manifest["outputs"]:
        p = root / entry["path"]
        if not p.exists():
            problems.append(f"{entry['path']}: output missing")
            continue
        if sha256_file(p) != entry["sha256"]:
            problems.append(f"{entry['path']}: output bytes changed since rule "
                            f"{manifest['rule']} wrote it")
        for changed in changed_inputs:
            problems.append(f"{entry['path']}: made from an input that changed: {changed}")
    return problems


def verify(folder: str | os.PathLike, root: str | os.PathLike = ".") -> tuple[int, list[str]]:
    """(number of manifests checked, problems) for every manifest under `folder`."""
    manifests = find_manifests(folder)
    return len(manifests), verify_manifests(manifests, root)


def verify_manifests(manifests, root: str | os.PathLike = ".") -> list[str]:
    """Problems of each manifest, each line prefixed with the manifest's path."""
    problems = []
    for m in manifests:
        problems += [f"{_rel(m, Path(root).resolve())}: {p}" for p in verify_manifest(m, root)]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m minimodel.manifest", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_verify = sub.add_parser("verify", help="re-hash every output and input under FOLDER")
    p_verify.add_argument("folder", nargs="?", default="results")
    p_verify.add_argument("--root", default=".", help="folder the manifest paths are relative to")
    args = parser.parse_args(argv)
    count, problems = verify(args.folder, args.root)
    if count == 0:
        print(f"no {MANIFEST_NAME} found under {args.folder}", file=sys.stderr)
        return 2
    for problem in problems:
        print(problem)
    print(f"{count} manifests checked, {len(problems)} problems", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
