"""Rule `readme`: the results README, every number read from this run's tables."""

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.provenance.io import write_text
from minimodel.provenance.manifest import stage
from minimodel.report import results_readme

with stage(snakemake):
    inp = snakemake.input
    paths = {key: getattr(inp, key) for key in
             ("symbolic", "cpu_bytes", "cpu_ceilings", "correctness", "timing", "timing_table",
              "gpu_bytes", "gpu_bytes_summary")}
    paths["benchmarks"] = list(inp.benchmarks)
    write_text(snakemake.output.readme, results_readme.render(inp.template, results_readme.collect(paths)))
