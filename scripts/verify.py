"""Rule `verify`: this run's manifests checked as `python -m minimodel verify` checks them.

Damage (an output whose bytes changed, a missing one, an edited manifest) fails the rule. What is
stale is listed in verify.txt and the log and does not fail it: the rule runs right after the
rules it checks, so a stale input means a file was edited while the run went on, and the next
`snakemake` re-runs the rules it feeds.
"""

import logging

from minimodel.provenance.io import write_text
from minimodel.provenance.manifest import stage
from minimodel.provenance.verify import check

with stage(snakemake):
    manifests = list(snakemake.input.manifests)
    report = check(snakemake.params.results, manifests=manifests)
    lines = report.lines()
    if report.damaged:
        raise SystemExit("verify found damaged results:\n" + "\n".join(lines))
    for finding in report.stale:
        logging.getLogger("verify").warning("stale: %s (rule %s)", finding, finding.rule)
    write_text(snakemake.output.report,
               "".join(f"ok {m}\n" for m in manifests) + "".join(f"{line}\n" for line in lines))
