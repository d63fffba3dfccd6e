"""`python -m minimodel.report.compare`, the same as `python -m minimodel compare`."""

import sys

from minimodel.report.compare.cli import main

sys.exit(main())
