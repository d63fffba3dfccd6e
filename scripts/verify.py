"""Rule `verify`: the manifests of this run re-hashed; any change fails the rule."""

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.provenance.io import write_text
from minimodel.provenance.manifest import stage, verify_manifests

with stage(snakemake):
    manifests = list(snakemake.input.manifests)
    problems = verify_manifests(manifests)
    if problems:
        raise SystemExit("verify found changed results:\n" + "\n".join(problems))
    write_text(snakemake.output.report,
               "".join(f"ok {m}\n" for m in manifests)
               + f"{len(manifests)} manifests verified, no problems\n")
