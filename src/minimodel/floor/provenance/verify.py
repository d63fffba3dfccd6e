"""`python -m minimodel verify`: whether a run folder still holds what its rules wrote (damage),
and which of the files it was made from, outside the folder, have changed since (staleness).

The two are kept apart, as `dvc status` and Snakemake's `--summary` keep them:
- damaged: a file of the run folder whose bytes no longer match the manifest that recorded it
  (an output, a table another rule read, a manifest edited after its rule wrote it), or one
  that is missing. The run does not hold what it says it holds.
- stale: an input from outside the run folder (the project's scripts and modules, a template, a
  contender's module) that has changed, or is not found here, since the rule ran; or a file of
  the run re-made by its rule after another rule read it. The results are intact, and older
  than the code around them: re-running the rules named brings them up to date.
- the environment (packages, CPU, GPU, driver, host) each manifest records is shown and never
  checked: a run made on another machine is neither stale nor damaged for it. Whether two
  machines' numbers agree is `python -m minimodel compare`'s question.

The workflow's own `verify` rule (`scripts/verify.py`) uses the same check on the run's
manifests; `docs/verify.md` explains it for users.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from minimodel.floor import commands
from minimodel.floor.provenance.io import sha256_file
from minimodel.floor.provenance.reading import (
    MANIFEST_NAME,
    ProvenanceError,
    find_manifests,
    load_manifest,
    locate,
    owner_in_run,
    self_hash_problem,
)

DAMAGED, STALE = "damaged", "stale"
CODE_KINDS = ("script", "module")  # never part of a run, wherever they lie
# What an input recorded as data is, by its name, where it is not data: a contender's module and
# the files it imports (recorded among the rule's data inputs: docs/contenders-inputs.md) are
# code; a Jinja template is the README's words
DATA_THAT_IS = {".py": "contender code", ".so": "contender code", ".pyd": "contender code",
                ".j2": "template"}
NOT_FOUND = "not found here"

DESCRIPTION = f"""\
Check a run folder against its manifests: what is damaged, what is stale, where it ran.

Every {MANIFEST_NAME} under FOLDER is read, and every file it records re-hashed, from any
directory, where it lies now: a run copied or moved since it was made (into another run's
folder too) is read where it is, each manifest's run found from the folder its rule writes:

  damaged  a file of the run folder whose bytes no longer match the manifest that recorded
           it (an output, a table another rule read, an edited manifest), or a missing one
  stale    an input from outside the run folder that changed, or is not found here, since
           the rule ran: the project's scripts and modules, a template, a contender's module;
           or a file of the run that its rule re-made after another rule read it. Listed
           with the rules it feeds; re-running them brings the run up to date
  environment  the packages, CPU, GPU, driver and host each rule ran on: shown, never
           checked (a run from another machine is not stale for it; `python -m minimodel
           compare` tells whether two machines agree)

Config values are recorded as each rule's parameters; whether today's config would change them
is Snakemake's question (`snakemake -n`). Everything is printed on stdout, one finding a line
(starting with "damaged" or "stale"), then the summary. See docs/verify.md.
"""
EPILOG = """\
exit codes:
  0  nothing damaged (stale inputs, if any, are listed)
  1  something damaged; with --strict, also when something is stale
  2  no manifest.json under FOLDER, or the arguments were wrong
"""


@dataclass(frozen=True)
class Finding:
    """One file that is damaged or stale, as one manifest (of `rule`) sees it."""

    kind: str  # DAMAGED or STALE
    path: str  # the file, as shown to the user
    what: str  # what is wrong with it, in a few words
    rule: str  # the rule whose manifest records the file
    source: Path | None = None  # that manifest

    def __str__(self) -> str:
        return f"{self.path}: {self.what}"


@dataclass
class Report:
    """What `check` found in one run folder."""

    folder: Path
    manifests: list[Path]
    root: Path  # where inputs from outside the run folder were looked for, when not found otherwise
    findings: list[Finding] = field(default_factory=list)
    environments: dict[str, list[str]] = field(default_factory=dict)  # line -> rules run there

    @property
    def damaged(self) -> list[Finding]:
        return [f for f in self.findings if f.kind == DAMAGED]

    @property
    def stale(self) -> list[Finding]:
        return [f for f in self.findings if f.kind == STALE]

    def exit_code(self, strict: bool = False) -> int:
        if not self.manifests:
            return 2
        return 1 if self.damaged or (strict and self.stale) else 0

    def lines(self, strict: bool = False) -> list[str]:
        """The report as printed: one line per damaged file, per stale file (with every rule it
        feeds), per environment, then the summary."""
        out = [f"damaged  {f}" for f in self.damaged]
        stale = sorted(_grouped(self.stale))
        out += [f"stale    {path}: {what} since {_rules(rules)} ran" for (path, what), rules in stale]
        out += [f"environment  {line} ({'every rule' if len(self.environments) == 1 else _rules(rules)}"
                "; recorded, not checked)" for line, rules in self.environments.items()]
        n = len(self.manifests)
        damage = f"{len(self.damaged)} damaged" if self.damaged else "nothing damaged"
        staleness = f"{len(stale)} stale (re-running the rules named brings them up to date)" \
            if stale else "nothing stale"
        if any(what.endswith(NOT_FOUND) for (_, what), _ in stale):
            staleness += (f"; for inputs {NOT_FOUND}, run verify from the checkout that made the "
                          f"run, or name it with --root (now {_shown(self.root)})")
        hint = " (--strict: 1)" if stale and not self.damaged and not strict else ""
        out.append(f"{n} manifest{'s' * (n != 1)} checked under {_shown(self.folder)}: {damage}, "
                   f"{staleness}; exit {self.exit_code(strict)}{hint}")
        return out


def _grouped(findings: Iterable[Finding]) -> list[tuple[tuple[str, str], list[str]]]:
    groups: dict[tuple[str, str], list[str]] = {}
    for f in findings:
        rules = groups.setdefault((f.path, f.what), [])
        if f.rule not in rules:
            rules.append(f.rule)
    return list(groups.items())


def _rules(rules: list[str]) -> str:
    return ("rule " if len(rules) == 1 else "rules ") + ", ".join(rules)


def _shown(path: Path) -> str:
    """A path as the user can open it: relative to the current directory when below it."""
    try:
        return Path(path).relative_to(Path.cwd().resolve()).as_posix() or "."
    except ValueError:
        return Path(path).as_posix()


def environment_line(env: dict) -> str:
    """A manifest's recorded environment in one line: device, driver, software, host."""
    gpu = env.get("gpu") if isinstance(env.get("gpu"), dict) else {}
    parts = [str(env.get("device") or "device not recorded")]
    parts += [f"{label} {gpu[key]}" for key, label in (("driver", "driver"), ("cuda_runtime", "CUDA"))
              if gpu.get(key)]
    parts += [f"{key} {env[key]}" for key in ("torch", "triton", "python") if env.get(key)]
    if env.get("packages"):
        parts.append(f"{env['packages']} packages (sha256 {str(env.get('packages_sha256'))[:12]})")
    if env.get("triton_interpret"):
        parts.append("Triton interpreter")
    if env.get("host"):
        parts.append(f"host {env['host']}")
    return ", ".join(parts)


class _Checker:
    """Hashes each file once, and reads each manifest's outputs once, for one run folder."""

    def __init__(self, folder: Path, default_root: Path, run: list[Path]):
        self.folder, self.default_root, self.run = folder, default_root, set(run)
        self.hashes: dict[Path, str | None] = {}
        self.records: dict[Path, dict[Path, str] | None] = {}

    def sha(self, path: Path) -> str | None:
        """The file's sha256; None when it is not a file."""
        if path not in self.hashes:
            self.hashes[path] = sha256_file(path) if path.is_file() else None
        return self.hashes[path]

    def where(self, manifest_path: Path, manifest: dict):
        return locate(self.folder, manifest_path, manifest, self.default_root)

    def outputs(self, owner: Path) -> dict[Path, str] | None:
        """Where `owner`'s outputs lie now, with the sha256 it recorded; None when the manifest
        cannot be read or was edited (it vouches for nothing)."""
        if owner not in self.records:
            try:
                manifest = load_manifest(owner)
            except ProvenanceError:
                manifest = None
            if manifest is None or self_hash_problem(manifest):
                self.records[owner] = None
            else:
                where = self.where(owner, manifest)
                self.records[owner] = {where(e["path"]): e["sha256"] for e in manifest["outputs"]}
        return self.records[owner]

    def changed_run_file(self, path: Path, reader: str) -> Finding | None:
        """A file of the run whose bytes differ from what rule `reader` read: stale when the
        manifest above it vouches for its bytes now (its rule re-made it), damaged otherwise.
        None when that manifest is one of the run's, which reports the damage itself."""
        owner = owner_in_run(path, self.folder)
        record = self.outputs(owner) if owner is not None else None
        if owner is not None and (owner == path and record is not None
                                  or record and record.get(path) == self.sha(path)):
            rule = load_manifest(owner)["rule"]
            return Finding(STALE, _shown(path), f"data re-made by rule {rule}", reader)
        if owner in self.run and (owner == path or record is None or path in record):
            return None
        what = "missing" if self.sha(path) is None else f"bytes differ from what rule {reader} read"
        return Finding(DAMAGED, _shown(path), what, reader)

    def manifest(self, path: Path) -> tuple[list[Finding], dict | None]:
        """The findings of one manifest, and its content (None when it cannot be read)."""
        try:
            manifest = load_manifest(path)
        except ProvenanceError as err:
            what = str(err).removeprefix(f"{path} ")
            return [Finding(DAMAGED, _shown(path), what, "?", path)], None
        rule = manifest["rule"]
        found = []
        if edited := self_hash_problem(manifest):
            found.append(Finding(DAMAGED, _shown(path), edited, rule))
        where = self.where(path, manifest)
        for entry in manifest["outputs"]:
            now = where(entry["path"])
            sha = self.sha(now)
            if sha is None:
                found.append(Finding(DAMAGED, _shown(now), f"missing, an output of rule {rule}", rule))
            elif sha != entry["sha256"]:
                found.append(Finding(DAMAGED, _shown(now), f"bytes differ from what rule {rule} wrote",
                                     rule))
        for entry in manifest["inputs"]:
            now = where(entry["path"])
            sha = self.sha(now)
            if sha == entry["sha256"]:
                continue
            if entry["kind"] in CODE_KINDS or not now.resolve().is_relative_to(self.folder):
                state = "changed" if sha is not None else NOT_FOUND
                found.append(Finding(STALE, _shown(now), f"{_kind(entry)} {state}", rule))
            elif finding := self.changed_run_file(now, rule):
                found.append(finding)
        return [Finding(f.kind, f.path, f.what, f.rule, path) for f in found], manifest


def _kind(entry: dict) -> str:
    """What a recorded input is, in a finding's words: its manifest's kind, but a data input that
    is code or a template is called so (`DATA_THAT_IS`)."""
    if entry["kind"] == "data":
        return DATA_THAT_IS.get(Path(entry["path"]).suffix, "data")
    return entry["kind"]


def check(folder: str | os.PathLike, root: str | os.PathLike | None = None,
          manifests: Iterable[str | os.PathLike] | None = None) -> Report:
    """Damage and staleness of the run in `folder`: its manifests (`find_manifests`, or the ones
    given), every output and input they record, and the environments they ran in.

    `root`: where the paths of a manifest that does not record its own path, and the inputs from
    outside a run folder copied away from its checkout, are read (default: the current directory).
    """
    folder = Path(folder).resolve()
    if manifests is not None:
        paths = [Path(m).resolve() for m in manifests]
    else:
        paths = [p.resolve() for p in find_manifests(folder)] if folder.is_dir() else []
    checker = _Checker(folder, Path(root or ".").resolve(), paths)
    report = Report(folder, paths, checker.default_root)
    for path in paths:
        findings, manifest = checker.manifest(path)
        report.findings += findings
        if manifest is not None:
            env = manifest.get("environment") or {}
            rules = report.environments.setdefault(environment_line(env), [])
            rules += [] if manifest["rule"] in rules else [manifest["rule"]]
    return report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folder", nargs="?", default="results", metavar="FOLDER",
                        help="the run folder to check (default: results, relative to the directory "
                             "verify is run from); reference runs under FOLDER/reference are runs of "
                             "their own, left out where FOLDER holds a run, each checked where it "
                             "holds none (a checkout before its first run)")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 when something is stale, as when something is damaged")
    parser.add_argument("--root", default=None,
                        help="where the paths of older manifests (which do not record their own "
                             "path) and the inputs of a run folder copied out of its checkout are "
                             "read; default: the current directory")


def run(args: argparse.Namespace) -> int:
    report = check(args.folder, args.root)
    if report.manifests:
        print("\n".join(report.lines(args.strict)))
        return report.exit_code(args.strict)
    # a checkout before its first run: its committed reference runs are what its results hold
    folder = Path(args.folder)
    refs = [r for p in sorted((folder / "reference").glob("*")) if p.is_dir()
            if (r := check(p, args.root)).manifests]
    if not refs:
        what = "is not a folder" if not folder.is_dir() else f"holds no {MANIFEST_NAME}"
        print(f"verify: {args.folder} {what}: give the results folder of a run "
              "(python -m minimodel verify --help)", file=sys.stderr)
        return 2
    print(f"{_shown(folder)} holds no run of its own yet (`make run` makes one): checking the "
          f"committed reference run{'s' * (len(refs) > 1)} under it, each a run of its own")
    for ref in refs:
        print("\n".join(ref.lines(args.strict)))
    return max(ref.exit_code(args.strict) for ref in refs)


def main(argv: list[str] | None = None) -> int:
    """`python -m minimodel verify`."""
    return commands.main("verify", sys.modules[__name__], argv)
