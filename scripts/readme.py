"""Rule `readme`: the results README and the report's headline numbers, every number read from
this run's tables."""

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.floor.provenance.io import write_text
from minimodel.floor.provenance.manifest import stage
from minimodel.report import decode_answers, results_readme

with stage(snakemake):
    inp = snakemake.input
    paths = {key: getattr(inp, key) for key in
             ("symbolic", "cpu_bytes", "cpu_ceilings", "correctness", "timing", "timing_table",
              "gpu_bytes", "gpu_bytes_summary")}
    paths["benchmarks"] = list(inp.benchmarks)
    numbers = results_readme.collect(paths)
    numbers["decode"] = decode_answers.answers(
        {"symbolic": inp.decode_symbolic, "cpu": inp.decode_cpu, "gpu": inp.decode_gpu,
         "gpu_summary": inp.decode_gpu_summary, "timing": inp.timing})
    write_text(snakemake.output.readme, results_readme.render(inp.template, numbers))
    write_text(snakemake.output.headline, results_readme.render(inp.headline_template, numbers))
