"""Rule `gpu_timing`: the timing stage's shards (rule gpu_timing_shard) gathered into its tables,
as the unsharded stage writes them; refused where the shards ran on different machines."""

import json

import pandas as pd

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.floor import contract
from minimodel.floor.provenance.io import write_csv, write_json
from minimodel.floor.provenance.manifest import stage
from minimodel.gpu import shards_gather

with stage(snakemake) as st:
    shards = shards_gather.read_shards(snakemake.input.shards)
    cpu_prediction = json.loads(open(snakemake.input.cpu_ceilings).read())["prediction"]
    try:
        rows, samples, summary = shards_gather.timing(shards, snakemake.params.cfg, cpu_prediction,
                                                      snakemake.params.random_seed)
    except shards_gather.GatherError as err:
        raise SystemExit(f"rule gpu_timing: {err}") from None
    if summary["device"] is None:
        st.extra.update(backend="none", status=contract.NO_GPU_TIMING)
        print(f"gpu_timing: no CUDA device; {snakemake.output.table} lists the {len(rows)} planned "
              "points as not run", file=st.progress)
    else:
        st.extra.update(backend="cuda", device=summary["device"])
    st.extra["shards"] = [s["name"] for s in shards]
    write_csv(snakemake.output.table, pd.DataFrame(rows))
    write_csv(snakemake.output.samples, pd.DataFrame(samples, columns=contract.TIMING_SAMPLES_COLUMNS))
    write_json(snakemake.output.summary, summary)
