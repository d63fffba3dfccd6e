"""Rule `readme`: the results README, every number read from this run's tables."""

from minimodel import readme
from minimodel.manifest import stage, write_text

with stage(snakemake):
    inp = snakemake.input
    paths = {key: getattr(inp, key) for key in
             ("symbolic", "cpu_bytes", "cpu_ceilings", "correctness", "timing", "timing_table")}
    paths["benchmarks"] = list(inp.benchmarks)
    write_text(snakemake.output.readme, readme.render(inp.template, readme.collect(paths)))
