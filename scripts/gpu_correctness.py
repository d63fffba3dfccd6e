"""Rule `gpu_correctness`: the kernel's sweep, forward and backward; the table is written, then a
failure of either fails the rule."""

import sys

import pandas as pd

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.contenders import registry
from minimodel.floor.provenance import machine
from minimodel.floor.provenance.io import write_csv, write_json
from minimodel.floor.provenance.manifest import stage
from minimodel.gpu import correctness

with stage(snakemake) as st:
    cfg = snakemake.params.cfg
    # with require_cuda, a machine without a usable GPU is an error, not the interpreter
    backend = correctness.select_backend(machine.gpu_required(snakemake.params.require_cuda))
    random_seed = snakemake.params.random_seed
    # the kernel's rows, then the contenders'; a contender that fails never fails the rule
    rows = correctness.run(cfg, backend, random_seed, registry.from_params(snakemake.params.contenders),
                           progress=st.progress)
    summary = correctness.summarize(rows, backend, random_seed)
    backward = summary["backward"]
    backward_passed = None if backward is None else backward["all_passed"]
    st.extra.update(backend=backend, all_passed=summary["all_passed"], backward_all_passed=backward_passed)
    table = pd.DataFrame(rows).assign(backend=backend)
    write_csv(snakemake.output.table, table)
    write_csv(snakemake.log.table, table)  # Snakemake deletes a failed job's outputs, not its logs
    write_json(snakemake.output.summary, summary)
    if not summary["all_passed"] or backward_passed is False:
        failed = table[table["passed"] == False]  # noqa: E712 (skipped cases hold None)
        print(failed.to_string(), file=sys.stderr)
        raise SystemExit(f"{len(failed)} correctness cases failed; every case is in {snakemake.log.table}")
