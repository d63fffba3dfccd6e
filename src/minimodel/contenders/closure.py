"""A contender's code: every file its module imports, followed through, by reading the source.

The files Python runs to import the contender's module (`spec.module_files`) are read with `ast`,
and each `import` in them (anywhere: in functions, under `if` and `try` too; relative ones
against the file's package) is found the way the child process finds it, without importing
anything. What is found is:

- a file of no installed distribution and not of the standard library (the user's own helpers,
  wherever they are on the path; a package's `__init__` on the way): hashed, an input of the
  rules that run the contender, and read in turn;
- a module of an installed distribution (a `.dist-info` whose RECORD lists the file: torch,
  triton, flash-attn): its distribution's name and version are recorded, its files not read;
- the standard library (`sys.stdlib_module_names`): nothing.

A compiled extension outside any distribution is hashed but not read (what it loads is not
followed). An import the finder cannot find (an optional one under `try`) is skipped; so is
what a module imports dynamically (`importlib.import_module`, `__import__`, `sys.path` edits at
run time) and any data file it reads (docs/contenders-inputs.md says this to users).
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from minimodel.contenders.spec import Contender, ContenderError, _find_spec, _searching, module_files


@dataclass(frozen=True)
class Closure:
    files: tuple[Path, ...]  # hashed: the contender's module and every file it imports, sorted
    packages: dict[str, str]  # installed distributions it imports: name -> version


def closure(contender: Contender, search: tuple[Path, ...]) -> Closure:
    """The contender's code: its module's files and every file they import, followed through,
    and the installed distributions reached on the way."""
    module = contender.fn.split(":")[0]
    files: set[Path] = set()
    packages: dict[str, str] = {}
    todo: list[tuple[Path, str, bool]] = []
    with _searching(search):
        module_files(contender, search)  # not found: one line naming the contender
        for path, name, is_package in _levels(module, packages):
            files.add(path)
            todo.append((path, name, is_package))
        seen: set[str] = {module}
        while todo:
            path, name, is_package = todo.pop()
            for imported in _imports(path, name, is_package):
                if imported in seen:
                    continue
                seen.add(imported)
                for found, found_name, found_package in _levels(imported, packages):
                    if found not in files:
                        files.add(found)
                        if found.suffix == ".py":
                            todo.append((found, found_name, found_package))
    return Closure(tuple(sorted(files)), dict(sorted(packages.items())))


def _levels(name: str, packages: dict[str, str] | None = None):
    """(file, module name, is a package) of each level of a dotted name that is the user's code:
    "a", "a.b", "a.b.c", as far as they are found. A standard-library module gives none; a module
    of an installed distribution gives none and puts the distribution into `packages`."""
    top = name.split(".")[0]
    if top in sys.stdlib_module_names or top in sys.builtin_module_names:
        return
    locations = None
    parts = name.split(".")
    for depth in range(1, len(parts) + 1):
        spec = _find_spec(".".join(parts[:depth]), locations)
        if spec is None:
            return
        origin = spec.origin if spec.has_location and spec.origin else None
        if origin is not None:
            dist = _distribution(top, origin)
            if dist is not None:
                if packages is not None:
                    packages[dist.metadata["Name"]] = dist.version
                return
            yield Path(origin).resolve(), spec.name, spec.submodule_search_locations is not None
        locations = spec.submodule_search_locations
        if locations is None:
            return


def _imports(path: Path, name: str, is_package: bool) -> list[str]:
    """Every module name a file's imports may load, absolute: `from a import b` gives a and a.b
    (b may be a submodule); relative imports are resolved against the file's package."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as err:
        raise ContenderError(f"{path}, line {err.lineno}: not valid Python: {err.msg}") from None
    except ValueError as err:  # Python 3.11: a null byte is a ValueError, not a SyntaxError
        raise ContenderError(f"{path}: not valid Python: {err}") from None
    package = name if is_package else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                if node.level - 1 > len(parts) or not parts:
                    continue  # beyond the top package: Python refuses it too
                base = ".".join(parts[:len(parts) - (node.level - 1)])
                module = f"{base}.{node.module}" if node.module else base
            elif node.module:
                module = node.module
            else:
                continue
            found += [module] + [f"{module}.{a.name}" for a in node.names if a.name != "*"]
    return found


def _distribution(top: str, origin: str) -> importlib.metadata.Distribution | None:
    """The installed distribution whose RECORD lists `origin`, among those providing `top`."""
    for dist_name in _providers().get(top, ()):
        listed = _installed_files(dist_name)
        if listed is None or os.path.relpath(os.path.realpath(origin), listed[0]) in listed[1]:
            return importlib.metadata.distribution(dist_name)
    return None


@functools.cache
def _providers() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


@functools.cache
def _installed_files(dist_name: str) -> tuple[str, frozenset[str]] | None:
    """The folder a distribution is installed in, and the files it installed there, relative to
    it; None when it lists none (then every module under its top-level names counts as installed)."""
    dist = importlib.metadata.distribution(dist_name)
    if dist.files is None:
        return None
    return os.path.realpath(dist.locate_file("")), frozenset(str(f) for f in dist.files)
