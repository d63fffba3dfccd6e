"""Rule `gpu_bytes`: the DRAM-bytes stage's shards (rule gpu_bytes_shard) gathered into its tables,
as the unsharded stage writes them; refused where the shards ran on different machines."""

import pandas as pd

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.floor import contract
from minimodel.floor.provenance.io import write_csv, write_json
from minimodel.floor.provenance.manifest import stage
from minimodel.gpu import hbm_plan, shards_gather
from minimodel.gpu import ncu as ncu_tool

with stage(snakemake) as st:
    shards = shards_gather.read_shards(snakemake.input.shards)
    try:
        rows, kernels, first = shards_gather.dram_bytes(shards)
    except shards_gather.GatherError as err:
        raise SystemExit(f"rule gpu_bytes: {err}") from None
    table = pd.DataFrame(rows)
    if first["measured"]:  # the device's record is the shards' (this host may have no GPU)
        statuses = table["status"].value_counts().to_dict()
        summary = {**first, "statuses": statuses, "measured": int(statuses.get(contract.MEASURED, 0)),
                   "contenders": [i for i in dict.fromkeys(table["impl"])
                                  if i not in contract.BYTES_SCHEMES]}
    else:
        summary = hbm_plan.summary(table, first["ncu"], snakemake.params.l2_bytes)
    st.extra.update(status=summary["status"], ncu=summary["ncu"], shards=[s["name"] for s in shards])
    if not summary["measured"]:  # said on the console where it happens, not only in the log
        print(f"gpu_bytes: {summary['status']}; {snakemake.output.table} lists the {len(table)} "
              "planned points", file=st.progress)
    write_csv(snakemake.output.table, table)
    write_csv(snakemake.output.kernels, pd.DataFrame(kernels, columns=ncu_tool.KERNEL_COLUMNS))
    write_json(snakemake.output.summary, summary)
