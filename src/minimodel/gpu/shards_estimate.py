"""The GPU stage's wall time on 1, 2, 4 and 8 GPUs of one host, estimated from a run's own times
(docs/cluster.md's table):

    python -m minimodel.gpu.shards_estimate results/reference/nvidia-h200

Each shard's seconds: where the run was made in shards, the wall time each shard recorded
(`wall_s` in its shard file); a run made in one piece (the committed reference) records none, and
they are modelled from what it did record:
- timing: per pass, each implementation's share of its "prepare <impl>" seconds (timing.json's
  `seconds`, split evenly over the passes it was prepared at) and of its "sample <impl>" seconds
  (split by its samples in samples.csv), and the passes' share of "reference"; beside them each
  shard pays the fixed costs the whole stage paid once: the ceilings and the contenders' start,
  which a shard makes at once (`timing.starting`), the longer of the two; and the process's own
  start and end (the job's benchmark less the seconds it counts);
- the correctness sweep and the DRAM bytes record no time per case or point: a shard's share of
  the job's benchmark seconds is its share of the rows that ran (not skipped), beside the fixed
  costs of a process and its contenders' start, one after the other;
- the warm-up: one job, its benchmark seconds.
The jobs are then placed on K GPUs as the workflow runs them (`schedule`): the warm-up first, a
correctness shard beside it on its GPU, a measuring shard alone on its GPU, no shard waiting for
another; a timing shard that starts before the warm-up has ended pays its own first calls'
compiles (gpu/warm/warm.csv's seconds of its passes).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from minimodel.floor import contract
from minimodel.floor.provenance import configcheck
from minimodel.gpu import shards

GPUS = (1, 2, 4, 8)
STARTED = "contenders' processes started"  # timing.json's seconds of the contenders' start


def _benchmark(run: Path, rule: str) -> float:
    return float(pd.read_csv(run / contract.BENCHMARKS / f"{rule}.tsv", sep="\t")["s"].iloc[0])


def _shard_walls(run: Path, path: str) -> dict[str, float] | None:
    found = sorted((run / path.split("{shard}")[0]).glob("*/shard.json"))
    return {p.parent.name: json.loads(p.read_text())["wall_s"] for p in found} or None


def timing_shards(run: Path, cfg: dict, keys) -> dict[str, float]:
    """Each timing shard's seconds (module docstring)."""
    walls = _shard_walls(run, contract.TIMING_SHARD)
    if walls:
        return walls
    summary = json.loads((run / contract.TIMING_SUMMARY).read_text())
    seconds, rows = summary["seconds"], pd.read_csv(run / contract.TIMING)
    samples = pd.read_csv(run / contract.TIMING_SAMPLES)
    prepared = rows[~rows["status"].astype(str).str.startswith(contract.SKIPPED)]
    per_prepare = {i: seconds.get(f"prepare {i}", 0.0) / n
                   for i, n in prepared.groupby("impl").size().items()}
    per_sample = {i: seconds.get(f"sample {i}", 0.0) / n for i, n in samples.groupby("impl").size().items()}
    taken = samples.groupby([*contract.TIMING_KEY]).size()
    passes = prepared.groupby(["grid", "d", "causal", "direction"])
    sample_key = list(contract.TIMING_KEY)
    fixed = max(seconds.get("ceilings", 0.0), seconds.get(STARTED, 0.0)) + _process(run)
    points = rows.groupby(["grid", "N", "d", "causal", "direction"]).ngroups
    reference = seconds.get("reference", 0.0) / max(1, points)
    estimate: dict[str, float] = {}
    for key, group in passes:
        item = dict(zip(("grid", "d", "causal", "direction"), key, strict=True))
        name = shards.name({k: item[k] for k in keys})
        spent = sum(per_prepare.get(r.impl, 0.0)
                    + per_sample.get(r.impl, 0.0) * taken.get(tuple(getattr(r, k) for k in sample_key), 0)
                    for r in group.itertuples())
        estimate[name] = estimate.get(name, fixed) + spent + reference * group.groupby("N").ngroups
    return estimate


def _process(run: Path) -> float:
    """A GPU job's process's own start and end: the timing job's seconds less those it counts."""
    seconds = json.loads((run / contract.TIMING_SUMMARY).read_text())["seconds"]
    return _benchmark(run, "gpu_timing") - sum(seconds.values())


def _fixed(run: Path) -> float:
    """What every correctness or DRAM-bytes shard pays that its whole stage paid once: its
    contenders' start (the timing job's), and its process's own start and end."""
    seconds = json.loads((run / contract.TIMING_SUMMARY).read_text())["seconds"]
    return seconds.get(STARTED, 0.0) + _process(run)


def _by_rows(run: Path, rule: str, table: str, keys, shard_path: str) -> dict[str, float]:
    """Each shard's seconds of a stage that records none per row: its share of the rows that ran."""
    walls = _shard_walls(run, shard_path)
    if walls:
        return walls
    rows, fixed = pd.read_csv(run / table), _fixed(run)
    ran = rows[~rows[contract.SKIPPED].astype(bool)] if contract.SKIPPED in rows else rows
    names = ran.apply(lambda r: shards.name({k: r[k] for k in keys}), axis=1) if keys else pd.Series(
        shards.WHOLE, index=ran.index)
    share = names.value_counts() / len(ran)
    rest = _benchmark(run, rule) - fixed
    return {name: fixed + rest * s for name, s in share.items()}


def schedule(gpus: int, warm: float, correctness: dict, timing: dict, dram: dict,
             compiles: dict | None = None) -> float:
    """The stage's wall seconds on `gpus` GPUs (module docstring): the warm-up first, then, each
    time, the job that can start soonest (the longest of those), each on the GPU it can start on
    soonest; a timing shard that starts before the warm-up ends compiles its own first calls
    (`compiles`: seconds by shard). No shard waits for another: the sweep's gather is what the
    timing's gather waits for."""
    free = {g: {"gpu": 0.0, "gpu_measure": 0.0} for g in range(gpus)}
    free[0]["gpu_measure"] = warm_end = warm  # the warm-up starts first (its `priority`)
    waiting = [(f"c:{n}", s, ("gpu",)) for n, s in correctness.items()] + \
        [(f"b:{n}", s, ("gpu", "gpu_measure")) for n, s in dram.items()] + \
        [(f"t:{n}", s, ("gpu", "gpu_measure")) for n, s in timing.items()]
    done: dict[str, float] = {"warm": warm_end}
    while waiting:
        best = None
        for job in sorted(waiting, key=lambda j: -j[1]):
            for g, slots in free.items():
                start = max(slots[s] for s in job[2])
                if best is None or start < best[0]:
                    best = (start, job, g)
        start, job, g = best
        took = job[1] + ((compiles or {}).get(job[0][2:], 0.0)
                         if job[0].startswith("t:") and start < warm_end else 0.0)
        for s in job[2]:
            free[g][s] = start + took
        done[job[0]] = start + took
        waiting.remove(job)
    return max(done.values())


def _compiles(run: Path, keys) -> dict[str, float]:
    """Each timing shard's first calls' seconds, as the warm-up made them (gpu/warm/warm.csv)."""
    rows = pd.read_csv(run / contract.WARM).dropna(subset=["seconds"])
    names = rows.apply(lambda r: shards.name({k: r[k] for k in keys}), axis=1)
    return rows.groupby(names)["seconds"].sum().to_dict()


def estimate(run: Path, config: dict) -> pd.DataFrame:
    """The table: GPUs, the stage's wall seconds and its longest shard, beside the unsharded stage's
    (None for a run made in shards)."""
    gpu = config["gpu"]
    keys = gpu["shards"]
    ran = json.loads((run / contract.manifest("gpu_timing")).read_text())["params"]["cfg"]
    timing = timing_shards(run, {**gpu["timing"], **{k: v for k, v in ran.items() if k in gpu["timing"]}},
                           keys["timing"])
    correctness = _by_rows(run, "gpu_correctness", contract.CORRECTNESS, keys["correctness"],
                           contract.CORRECTNESS_SHARD)
    dram = _by_rows(run, "gpu_bytes", contract.GPU_BYTES, keys["bytes"], contract.GPU_BYTES_SHARD)
    warm = _benchmark(run, "gpu_warm")
    compiles = _compiles(run, keys["timing"])
    # the stage unsharded on one GPU, where the run was made so (a run in shards has no such time)
    whole = None
    if (run / contract.BENCHMARKS / "gpu_timing.tsv").is_file():
        whole = (max(_benchmark(run, "gpu_correctness"), warm) + _benchmark(run, "gpu_timing")
                 + _benchmark(run, "gpu_bytes"))
    longest = round(max([*timing.values(), *correctness.values(), *dram.values(), warm]))
    return pd.DataFrame([{"GPUs": k, "wall_s": round(schedule(k, warm, correctness, timing, dram, compiles)),
                          "longest_job_s": longest, "timing_shards": len(timing),
                          "unsharded_one_gpu_s": None if whole is None else round(whole)} for k in GPUS])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a results folder (e.g. results/reference/nvidia-h200)")
    args = parser.parse_args(argv)
    print(estimate(args.run, configcheck.load_config()).to_string(index=False))


if __name__ == "__main__":
    main()
