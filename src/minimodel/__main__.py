"""The project's two commands for results folders.

    python -m minimodel verify [FOLDER]            # re-hash every manifest's outputs and inputs
    python -m minimodel compare RUN [REFERENCE]    # a run against a reference run, with tolerances
"""

import sys

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.provenance import manifest
from minimodel.report import compare

COMMANDS = {"verify": manifest.main, "compare": compare.main}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    return COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
