"""A rule's code: the files of the package its script imports (`code_closure`, the workflow's
`code` inputs of each rule and what its manifest records), the modules a process really
imported (`imported_modules`), that they are this checkout's (`check_code_tree`), and the commit
they came from (`git_state`).
"""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
from pathlib import Path

from minimodel.floor.provenance.reading import ProvenanceError

PACKAGE = "minimodel"


@functools.cache
def _imported_names(source: bytes) -> tuple[str, ...]:
    """The package's names a Python source imports (anywhere in it, functions too). Cached by the
    source: the rules of a Snakefile share most of their modules, and parsing each again for every
    rule took a fifth of a Snakemake start (docs/testing.md)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            found += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names]
    return tuple(name for name in found if name.split(".")[0] == PACKAGE)


def _imports(path: Path, src: Path) -> set[Path]:
    """Files of the package that a Python file imports directly (anywhere in it, functions too)."""
    found = set()
    for name in _imported_names(path.read_bytes()):
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):  # a module and every package above it
            rel = Path(*parts[1:depth]) if depth > 1 else Path()
            for candidate in (src / rel.with_suffix(".py") if depth > 1 else None,
                              src / rel / "__init__.py"):
                if candidate is not None and candidate.exists():
                    found.add(candidate)
    return found


def code_closure(script: str | os.PathLike, src: str | os.PathLike = Path("src") / PACKAGE) -> list[str]:
    """A rule's code: its script and every module of the package it imports, followed through.

    The one code-dependency tracker: the workflow lists these files as each rule's `code`
    inputs (so editing a module re-runs exactly the rules that use it), and `stage()` records
    them in the manifest, after checking that every module the script really imported is among
    them.
    """
    src = Path(src)
    todo, seen = [Path(script)], set()
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo.extend(_imports(path, src))
    seen.add(src / "__init__.py")
    return sorted(str(p) for p in seen)


def imported_modules() -> list[Path]:
    """Source files of every `minimodel` module loaded in this process."""
    files = set()
    for name, module in list(sys.modules.items()):
        if name == PACKAGE or name.startswith(PACKAGE + "."):
            file = getattr(module, "__file__", None)
            if file and file.endswith(".py"):
                files.add(Path(file).resolve())
    return sorted(files)


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


def check_code_tree(root: str | os.PathLike = ".") -> None:
    """Refuse to run when `minimodel` was imported from anywhere but this checkout's `src/`.

    An editable install from another checkout (or a plain install) would run other code than
    the files Snakemake tracks here, and the manifest would hash that other code.
    """
    expected = (Path(root) / "src" / PACKAGE).resolve()
    if not expected.is_dir():
        return  # not run from a checkout: nothing to compare with
    actual = Path(sys.modules[PACKAGE].__file__).resolve().parent
    if actual != expected:
        raise ProvenanceError(f"this checkout's code is {expected}, but Python imported {PACKAGE} "
                              f"from {actual}; run the workflow through its Snakefile (which puts "
                              f"{expected.parent} first on PYTHONPATH) or set PYTHONPATH={expected.parent}")
