"""The project's commands for results folders.

    python -m minimodel verify [FOLDER]            # re-hash every manifest's outputs and inputs
    python -m minimodel compare RUN [REFERENCE]    # a run against a reference run, with tolerances
    python -m minimodel headline [RUN] [--write]   # the README's headline numbers, from the reference
"""

import sys

from minimodel.provenance import manifest
from minimodel.report import compare, headline

COMMANDS = {"verify": manifest.main, "compare": compare.main, "headline": headline.main}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    return COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
