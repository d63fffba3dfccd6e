"""The GPU stages' shards through SLURM: the workflow that tests/test_slurm.py submits to its
one-node cluster, whose node declares two (fake) GPUs, read for what the shards did there."""

import datetime as dt

import pytest
from test_slurm import GPU_JOBS, main_run, slurm_runs  # noqa: F401 (the fixtures this module reads)

pytestmark = pytest.mark.workflow
TABLES = ("gpu/correctness/correctness.csv", "gpu/timing/timing.csv", "gpu/timing/samples.csv",
          "gpu/bytes/bytes.csv", "gpu/bytes/kernels.csv")


def _span(job: dict) -> tuple[dt.datetime, dt.datetime]:
    """When SLURM ran a job (scontrol's StartTime and EndTime, to the second)."""
    return dt.datetime.fromisoformat(job["StartTime"]), dt.datetime.fromisoformat(job["EndTime"])


def test_each_shard_is_a_job_of_its_own_and_two_run_at_once(main_run):  # noqa: F811
    for rule, shards in GPU_JOBS.items():
        jobs = [j for j in main_run["jobs"] if j["rule"] == rule]
        assert len({j["JobId"] for j in jobs}) == len(shards or (None,)), rule  # one job each
    gpu = [j for j in main_run["jobs"] if j["rule"] in GPU_JOBS]
    at_once = [(a["Comment"], b["Comment"]) for i, a in enumerate(gpu) for b in gpu[i + 1:]
               if _span(a)[0] < _span(b)[1] and _span(b)[0] < _span(a)[1]]
    print(at_once)
    assert at_once  # the node's two GPUs held two jobs at a time


def test_the_gathered_tables_equal_the_local_runs(main_run, tiny_run):  # noqa: F811
    for table in TABLES:
        assert (main_run["folder"] / "results" / table).read_bytes() == \
            (tiny_run.root / "results" / table).read_bytes(), table
