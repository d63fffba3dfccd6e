"""Where the project is, where a run may write, and whether this machine can hold what the config asks for.

`ROOT` is the checkout this package runs from (the only place that knows where the project root
is): every other module that reads the project's config, schema or committed references asks here.

`check_results_dir` and `check_written_folders` are called by the workflow before it plans
anything (`workflow/rules/common.smk`, `workflow/Snakefile`): inside the project a run goes to
results/ or a folder under it, never over the project's code, config, notes or tests, and never
into a committed reference run under results/reference/ unless the user asks for that run
(`overwrite_reference: true`). `check_memory` is called by a stage before it allocates: a size
in the config that this machine cannot hold stops the stage with the config key named.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

# The folder holding the minimodel package (src/ in a checkout), and the checkout around it: the
# project whose config, schema and committed reference runs are read; None for an installed copy.
SRC = Path(__file__).resolve().parents[3]
ROOT = SRC.parent if (SRC.parent / "workflow" / "Snakefile").is_file() else None
# The rule's log, for processes a stage starts (a contender's child appends its output there):
# set by `provenance.manifest.stage` for the stage's duration.
RULE_LOG_ENV = "MINIMODEL_RULE_LOG"
CONFIG = Path("config") / "config.yaml"
SCHEMA = Path("workflow") / "schemas" / "config.schema.yaml"


def root() -> Path:
    """The project: this package's checkout, else the current directory (an installed copy)."""
    return ROOT or Path.cwd()


# Inside the project, runs live here and nowhere else: every other folder holds tracked files.
RESULTS = Path("results")
# Committed reference runs: read, compared against, never a target by default.
REFERENCE = RESULTS / "reference"
ACCEPTED = ("accepted: results, a folder under results/ outside results/reference/, or a folder "
            "outside the project (and results/reference/<name> itself with "
            "--config overwrite_reference=True)")


class UnsafeResultsDir(ValueError):
    """A results_dir that would overwrite the project or a committed reference."""


class ConfigTooLarge(MemoryError):
    """A size in the config that this machine cannot hold."""


def inside(path: Path, folder: Path) -> bool:
    """Whether resolved `path` is `folder` or lies under it."""
    return path == folder or folder in path.parents


def _refusal(folder: Path, project: Path, asked_reference: Path | None) -> str | None:
    """Why resolved `folder` may not be written by a run, or None when it may.

    `asked_reference` is the one reference run overwrite_reference asked for (or None). Both
    results/ and its references are resolved too: a project whose results/ links elsewhere still
    keeps its references.
    """
    references = (project / REFERENCE).resolve()
    if inside(project, folder):
        return f"{folder}, which holds the project itself"
    if inside(folder, references) and not (asked_reference and inside(folder, asked_reference)):
        shown = Path(os.path.relpath(folder, project)) if inside(folder, project) else folder
        return f"{shown}/, which holds a committed reference run"
    if inside(folder, project) and not (inside(folder, project / RESULTS)
                                        or inside(folder, (project / RESULTS).resolve())):
        return f"{folder.relative_to(project)}/ in the project, outside results/"
    return None


def check_results_dir(results_dir: str | os.PathLike, project: str | os.PathLike,
                      overwrite_reference: bool = False) -> Path:
    """The resolved results folder, or UnsafeResultsDir saying why it is refused and what is accepted.

    `..` and symlinks are resolved first: results/../notes is notes/.
    """
    project = Path(project).resolve()
    results = (project / Path(results_dir).expanduser()).resolve()
    why = _refusal(results, project, _asked_reference(results, project, overwrite_reference))
    if why:
        raise UnsafeResultsDir(f"results_dir {str(results_dir)!r} is {why}: a run there would write "
                               f"over it; {ACCEPTED}")
    return results


def _asked_reference(results: Path, project: Path, overwrite_reference: bool) -> Path | None:
    """The reference run that overwrite_reference asks for: results_dir when it is one, as a whole."""
    if overwrite_reference and results.parent == (project / REFERENCE).resolve():
        return results
    return None


def check_written_folders(folders: Iterable[str | os.PathLike], results_dir: str | os.PathLike,
                          project: str | os.PathLike, overwrite_reference: bool = False) -> None:
    """Check each folder a rule writes (relative ones against the project), after resolving it.

    results_dir passing check_results_dir is not enough: a subfolder of it (symbolic/, say) may
    be a symlink into src/ or into a reference run.
    """
    project = Path(project).resolve()
    results = check_results_dir(results_dir, project, overwrite_reference)
    asked = _asked_reference(results, project, overwrite_reference)
    for folder in folders:
        written = project / Path(folder).expanduser()
        why = _refusal(written.resolve(), project, asked)
        if why:
            try:
                shown = written.relative_to(project / Path(results_dir).expanduser())
            except ValueError:
                shown = written
            raise UnsafeResultsDir(f"results_dir {str(results_dir)!r}: its folder {shown}/ resolves "
                                   f"to {why}: a run would write there; {ACCEPTED}")


def physical_memory() -> int:
    """Bytes of RAM on this machine."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def memory_shortfall(nbytes: int, have: int, fraction: float, what: str) -> str | None:
    """Why `nbytes` does not fit in `fraction` of `have` bytes (`what`: "of RAM on this machine"),
    or None when it fits: the one memory check, of the host (`check_memory`) and of a device."""
    if nbytes <= fraction * have:
        return None
    return (f"needs about {nbytes / 2**30:.1f} GiB, more than {fraction:.0%} of the "
            f"{have / 2**30:.1f} GiB {what}")


def check_memory(needs: dict[str, int], fraction: float = 0.8) -> None:
    """Stop, naming the config key, when one of `needs` (key -> bytes) exceeds this machine's RAM."""
    have = physical_memory()
    for key, nbytes in needs.items():
        short = memory_shortfall(nbytes, have, fraction, "of RAM on this machine")
        if short:
            raise ConfigTooLarge(f"{key} {short}: lower {key}")
