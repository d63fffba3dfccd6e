"""Rule `gpu_correctness`: the sweep's shards (rule gpu_correctness_shard) gathered into its table
and summary, as the unsharded sweep writes them; a failure of the kernel fails the rule."""

import sys

import pandas as pd

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.floor.provenance.io import write_csv, write_json
from minimodel.floor.provenance.manifest import stage
from minimodel.gpu import correctness, shards_gather

with stage(snakemake) as st:
    shards = shards_gather.read_shards(snakemake.input.shards)
    try:
        rows, backend, device_l2 = shards_gather.correctness(shards)
    except shards_gather.GatherError as err:
        raise SystemExit(f"rule gpu_correctness: {err}") from None
    random_seed = snakemake.params.random_seed
    summary = correctness.summarize(rows, backend, random_seed, device_l2)
    backward = summary["backward"]
    backward_passed = None if backward is None else backward["all_passed"]
    st.extra.update(backend=backend, all_passed=summary["all_passed"], backward_all_passed=backward_passed,
                    shards=[s["name"] for s in shards])
    table = pd.DataFrame(rows).assign(backend=backend)
    write_csv(snakemake.output.table, table)
    write_csv(snakemake.log.table, table)  # Snakemake deletes a failed job's outputs, not its logs
    write_json(snakemake.output.summary, summary)
    if not summary["all_passed"] or backward_passed is False:
        failed = table[table["passed"] == False]  # noqa: E712 (skipped cases hold None)
        print(failed.to_string(), file=sys.stderr)
        raise SystemExit(f"{len(failed)} correctness cases failed; every case is in {snakemake.log.table}")
