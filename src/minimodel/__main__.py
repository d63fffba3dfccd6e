"""`python -m minimodel COMMAND`: the project's commands for results folders.

Each command is a module with `add_arguments(parser)` and `run(args) -> exit code`. Its help is
its DESCRIPTION (or, lacking one, its docstring), whose first line is its line in
`python -m minimodel --help`, and its EPILOG where it has one (exit codes).
"""

import argparse
import sys

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.floor.commands import described, summary
from minimodel.floor.provenance import verify
from minimodel.report import compare, headline

COMMANDS = {"verify": verify, "compare": compare.cli, "headline": headline}

DESCRIPTION = """\
Commands for the results folders of minimodel's workflow (the workflow itself runs with
`snakemake`; see README.md). `python -m minimodel COMMAND --help` says what each checks and
what its exit codes mean."""


def parser() -> argparse.ArgumentParser:
    """`python -m minimodel`'s parser: one subcommand per entry of COMMANDS."""
    top = argparse.ArgumentParser(prog="python -m minimodel", description=DESCRIPTION)
    commands = top.add_subparsers(title="commands", metavar="COMMAND", dest="command")
    for name, module in COMMANDS.items():
        module.add_arguments(commands.add_parser(name, help=summary(module), **described(module)))
    return top


def main(argv: list[str] | None = None) -> int:
    top = parser()
    args = top.parse_args(sys.argv[1:] if argv is None else argv)
    if args.command is None:
        top.print_help(sys.stderr)
        return 2
    return COMMANDS[args.command].run(args)


if __name__ == "__main__":
    sys.exit(main())
