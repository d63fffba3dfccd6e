"""How a command of `python -m minimodel` is described and parsed, below the modules that hold the
commands (`provenance.verify`, `report.compare.cli`, `report.headline`) and `__main__`, which lists
them: a command module has `add_arguments(parser)`, `run(args) -> exit code`, and its help in
DESCRIPTION (or its docstring; the first line is its line in `python -m minimodel --help`) and
EPILOG (exit codes), where it has one."""

from __future__ import annotations

import argparse
import sys


def described(module) -> dict:
    """The keyword arguments of a parser that shows `module`'s help."""
    description = getattr(module, "DESCRIPTION", module.__doc__)
    return {"description": description, "epilog": getattr(module, "EPILOG", None),
            "formatter_class": argparse.RawDescriptionHelpFormatter}


def summary(module) -> str:
    """The command's line in `python -m minimodel --help`."""
    return described(module)["description"].strip().splitlines()[0].rstrip(".")


def main(name: str, module, argv: list[str] | None = None) -> int:
    """`python -m minimodel NAME ARGS...`, for one command alone (its module's `main`)."""
    parser = argparse.ArgumentParser(prog=f"python -m minimodel {name}", **described(module))
    module.add_arguments(parser)
    return module.run(parser.parse_args(sys.argv[1:] if argv is None else argv))
