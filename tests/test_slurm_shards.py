"""The GPU stages' shards through SLURM: the workflow that tests/test_slurm.py submits to its
one-node cluster, whose node declares two (fake) GPUs, read for what the shards did there."""

import datetime as dt

import pytest
from test_slurm import GPU_JOBS, main_run, slurm_runs  # noqa: F401 (the fixtures this module reads)

from minimodel.floor.provenance import manifest

pytestmark = pytest.mark.workflow
TABLES = ("gpu/correctness/correctness.csv", "gpu/timing/timing.csv", "gpu/timing/samples.csv",
          "gpu/bytes/bytes.csv", "gpu/bytes/kernels.csv")


def _span(m: dict) -> tuple[dt.datetime, dt.datetime]:
    return dt.datetime.fromisoformat(m["started"]), dt.datetime.fromisoformat(m["finished"])


def test_each_shard_is_a_job_of_its_own_and_two_run_at_once(main_run):  # noqa: F811
    timing = GPU_JOBS["gpu_timing_shard"]
    jobs = [j for j in main_run["jobs"] if j["rule"] == "gpu_timing_shard"]
    assert len({j["JobId"] for j in jobs}) == len(timing) > 1
    shards = {}
    for rule, names in GPU_JOBS.items():
        for name in names or ():
            stage = rule.split("_")[1]
            shards[f"{rule} {name}"] = manifest.load_manifest(
                main_run["folder"] / "results" / "gpu" / stage / "shards" / name / "manifest.json")
    at_once = [(a, b) for i, a in enumerate(shards) for b in list(shards)[i + 1:]
               if _span(shards[a])[0] < _span(shards[b])[1] and _span(shards[b])[0] < _span(shards[a])[1]]
    print(at_once)
    assert at_once
    for a, b in at_once:  # SLURM gave each its own GPU
        assert shards[a]["environment"]["slurm"]["gpus"] != shards[b]["environment"]["slurm"]["gpus"], (a, b)


def test_the_gathered_tables_equal_the_local_runs(main_run, tiny_run):  # noqa: F811
    for table in TABLES:
        assert (main_run["folder"] / "results" / table).read_bytes() == \
            (tiny_run.root / "results" / table).read_bytes(), table
