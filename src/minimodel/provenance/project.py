"""Where a run may write, and whether this machine can hold what the config asks for.

`check_results_dir` is called by the workflow before it plans anything
(`workflow/rules/common.smk`): results go to a folder of their own, never over the project's
code, config or tests, and never into a committed reference run unless the user says so
(`overwrite_reference: true`). `check_memory` is called by a stage before it allocates: a size
in the config that this machine cannot hold stops the stage with the config key named.
"""

from __future__ import annotations

import os
from pathlib import Path

# Folders of the project that hold code, config or tests: no results inside them.
PROTECTED = ("src", "workflow", "scripts", "tests", "config", ".git", ".snakemake", ".ci")
# Committed reference runs: read, compared against, never a target by default.
REFERENCE = Path("results") / "reference"


class UnsafeResultsDir(ValueError):
    """A results_dir that would overwrite the project or a committed reference."""


class ConfigTooLarge(MemoryError):
    """A size in the config that this machine cannot hold."""


def inside(path: Path, folder: Path) -> bool:
    """Whether resolved `path` is `folder` or lies under it."""
    return path == folder or folder in path.parents


def check_results_dir(results_dir: str | os.PathLike, project: str | os.PathLike,
                      overwrite_reference: bool = False) -> Path:
    """The resolved results folder, or UnsafeResultsDir saying why it is refused and what is accepted."""
    project = Path(project).resolve()
    results = (project / Path(results_dir).expanduser()).resolve()
    accepted = ("accepted: a folder of its own, such as results or results/<run>, "
                "or any folder outside the project")
    if inside(project, results):
        raise UnsafeResultsDir(f"results_dir {str(results_dir)!r} is {results}, which holds the project "
                               f"itself: a run would write over its files; {accepted}")
    for name in PROTECTED:
        if inside(results, project / name):
            raise UnsafeResultsDir(f"results_dir {str(results_dir)!r} is inside the project's {name}/; "
                                   f"{accepted}")
    reference = project / REFERENCE
    if inside(results, reference) and not overwrite_reference:
        if results == reference or any(results.rglob("manifest.json")):
            raise UnsafeResultsDir(
                f"results_dir {str(results_dir)!r} holds a committed reference run ({results}); a run "
                "there would overwrite it. Write a new run to a fresh folder and compare it "
                "(see the README), or pass --config overwrite_reference=True to replace it")
    return results


def physical_memory() -> int:
    """Bytes of RAM on this machine."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_memory(needs: dict[str, int], fraction: float = 0.8) -> None:
    """Stop, naming the config key, when one of `needs` (key -> bytes) exceeds this machine's RAM."""
    have = physical_memory()
    for key, nbytes in needs.items():
        if nbytes > fraction * have:
            raise ConfigTooLarge(f"{key} needs about {nbytes / 2**30:.1f} GiB, more than "
                              f"{fraction:.0%} of this machine's {have / 2**30:.1f} GiB: lower {key}")
