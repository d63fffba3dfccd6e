"""Rule `verify`: this run's manifests checked as `python -m minimodel verify` checks them.

Damage (an output whose bytes changed, a missing one, an edited manifest) fails the rule, naming
every damaged file; the manifests that recorded them are removed, so the next `snakemake` re-runs
their rules. What is stale is listed in verify.txt and the log and does not fail the rule: it runs
right after the rules it checks, so a stale input means a file was edited while the run went on,
and the next `snakemake` re-runs the rules it feeds.
"""

import logging
from pathlib import Path

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.floor.provenance.io import write_text
from minimodel.floor.provenance.manifest import ProvenanceError, stage
from minimodel.floor.provenance.verify import check

with stage(snakemake, checks_itself=("manifests",)):
    manifests = list(snakemake.input.manifests)
    report = check(snakemake.params.results, manifests=manifests)
    lines = report.lines()
    if report.damaged:
        for source in {f.source for f in report.damaged}:
            Path(source).unlink(missing_ok=True)
        raise ProvenanceError("found damaged results:\n" + "\n".join(lines) + "\nThe manifests that "
                              "record them were removed, so the next `snakemake` re-runs their rules")
    for finding in report.stale:
        logging.getLogger("verify").warning("stale: %s (rule %s)", finding, finding.rule)
    write_text(snakemake.output.report,
               "".join(f"ok {m}\n" for m in manifests) + "".join(f"{line}\n" for line in lines))
