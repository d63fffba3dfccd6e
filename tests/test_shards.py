"""The GPU stages as shards (minimodel.gpu.shards) gathered into their tables
(minimodel.gpu.shards_gather), and the GPUs of one host handed out to the jobs that run at once
(minimodel.gpu.device_slots).

The workflow tests read the session's tiny run (conftest's `tiny_run`, its GPU stages in shards:
the config's default `gpu.shards`) and change a copy of it: a second run from nothing, its stages
in one shard each, gives the same tables byte for byte; two GPUs faked for the run (`--resources
gpu=2 gpu_measure=2`, the documented command) run two timing shards at once on two devices; a
shard killed mid-run is the only one a second run makes again.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import copy_of_tiny_run, copy_project, snakemake, user_env

from minimodel.floor import contract
from minimodel.floor.provenance import configcheck, reading
from minimodel.gpu import device_slots, grids, shards, shards_estimate, shards_gather

ROOT = Path(__file__).resolve().parents[1]
CONFIG = configcheck.load_config()["gpu"]
GATHERED = ("gpu/correctness/correctness.csv", "gpu/correctness/correctness.json", "gpu/timing/timing.csv",
            "gpu/timing/timing.json", "gpu/timing/samples.csv", "gpu/bytes/bytes.csv", "gpu/bytes/bytes.json",
            "gpu/bytes/kernels.csv")
TARGETS = ("--", "results/gpu/timing/manifest.json", "results/gpu/bytes/manifest.json")


# ---- the shards ----------------------------------------------------------------------------
def test_the_default_timing_shards_give_eight_gpus_work_and_keep_each_point_whole():
    planned = shards.plan("timing", CONFIG["timing"], CONFIG["shards"]["timing"])
    assert len(planned) >= 8
    timed = [p for name, selection in planned.items()
             for p in grids.passes(shards.shard_config("timing", CONFIG["timing"], selection))]
    whole = grids.passes(CONFIG["timing"])
    assert sorted(map(str, timed)) == sorted(map(str, whole))  # every pass once, its point's index kept
    assert len({str(p) for p in timed}) == len(whole)


def test_a_timing_shard_lists_its_own_passes_only():
    cfg = CONFIG["timing"]
    selection = {"grid": contract.LAB_GRID, "d": 64, "direction": contract.BACKWARD}
    mine = shards.shard_config("timing", cfg, selection)
    assert "lab_n" not in mine and "fa_n" not in mine  # another shard's points change nothing here
    lab_backward = (contract.LAB_GRID, contract.BACKWARD)
    assert {(p.point.grid, p.direction) for p in grids.passes(mine)} == {lab_backward}
    # its points' indices are the whole grid's: their inputs' seeds
    lab = [p for p in grids.passes(cfg) if (p.point.grid, p.direction) == lab_backward]
    assert grids.passes(mine) == lab


@pytest.mark.parametrize("stage", shards.STAGES)
def test_no_key_makes_one_shard_and_an_unknown_key_is_refused(stage):
    assert shards.plan(stage, CONFIG[stage], []) == {shards.WHOLE: {}}
    with pytest.raises(ValueError, match=f"gpu.shards.{stage}: 'N' is no key .* accepted: "):
        shards.plan(stage, CONFIG[stage], ["N"])


def test_the_bytes_shards_are_the_plans_regimes_and_passes():
    from minimodel.gpu import hbm_plan

    rows = hbm_plan.plan(CONFIG["bytes"], 60 * 2**20)
    assert {(r["regime"], r["d"], r["direction"]) for r in rows} == \
        {(i["regime"], i["d"], i["direction"]) for i in shards.items("bytes", CONFIG["bytes"])}


# ---- the gather's refusal ----------------------------------------------------------------------
def _fake_shard(folder: Path, gpu: str) -> Path:
    """A timing shard's file and its manifest, as a shard that ran on GPU `gpu` writes them."""
    folder.mkdir(parents=True)
    (folder / "shard.json").write_text(json.dumps({"result": {"device": gpu}, "passes": [], "rows": [],
                                                   "order": []}))
    environment = {"gpu": {"name": gpu, "driver": "580.159.04", "cuda_runtime": "13.0"}, "torch": "2.11.0",
                   "triton": "3.6.0"}
    manifest = {"manifest": str(folder / "manifest.json"), "rule": "gpu_timing_shard", "outputs": [],
                "inputs": [], "environment": environment}
    manifest[reading.SELF_HASH] = reading.content_hash(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder / "shard.json"


def test_the_gather_refuses_shards_of_two_gpu_models_naming_both(tmp_path):
    paths = [_fake_shard(tmp_path / "lab-d64-forward", "NVIDIA H200"),
             _fake_shard(tmp_path / "flashattention-d64-forward", "NVIDIA H100 80GB HBM3")]
    with pytest.raises(shards_gather.GatherError) as refused:
        shards_gather.check_one_machine(shards_gather.read_shards(paths), contract.TIMING)
    said = str(refused.value)
    assert "different GPU models" in said and contract.TIMING in said
    assert "'NVIDIA H200' (shard lab-d64-forward)" in said
    assert "'NVIDIA H100 80GB HBM3' (shard flashattention-d64-forward)" in said


# ---- the GPUs of one host ------------------------------------------------------------------------
def _environ(tmp_path: Path, count: int) -> dict:
    return {device_slots.GPUS_VARIABLE: str(count), device_slots.FOLDER_VARIABLE: str(tmp_path / "slots"),
            device_slots.NVML_CHECK: "1"}


HOLD = """
import os, sys, time
from minimodel.gpu import device_slots
held = device_slots.claim(tuple(sys.argv[1].split(",")), wait_s=0.05)
print(held.index, os.environ["CUDA_VISIBLE_DEVICES"], time.time(), flush=True)
time.sleep(float(sys.argv[2]))
print(time.time(), flush=True)
"""


def _holder(tmp_path: Path, count: int, slots: tuple[str, ...], seconds: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", HOLD, ",".join(slots), str(seconds)], text=True,
                            stdout=subprocess.PIPE, env={**os.environ, **_environ(tmp_path, count)})


def test_without_the_workflows_variables_no_gpu_is_claimed():
    assert device_slots.claim(device_slots.MEASURING, environ={}) is None


def test_measuring_jobs_get_distinct_gpus_and_wait_when_all_are_taken(tmp_path):
    jobs = [_holder(tmp_path, 2, device_slots.MEASURING, 1.5) for _ in range(3)]
    said = [job.communicate(timeout=60)[0].split() for job in jobs]
    spans = [(int(s[0]), s[1], float(s[2]), float(s[3])) for s in said]
    assert {s[1] for s in spans} == {"0", "1"} and all(str(s[0]) == s[1] for s in spans)
    for i, a in enumerate(spans):
        for b in spans[i + 1:]:
            if a[2] < b[3] and b[2] < a[3]:  # at once: never on one GPU
                assert a[0] != b[0], spans
    assert sum(a[2] < b[3] and b[2] < a[3] for i, a in enumerate(spans) for b in spans[i + 1:]) >= 1


def test_a_warm_up_shares_a_gpu_with_the_sweep_but_never_with_a_measurement(tmp_path):
    sweep = device_slots.claim(device_slots.SWEEP, environ=_environ(tmp_path, 2))
    warm = _holder(tmp_path, 2, device_slots.WARM, 60)
    try:
        assert warm.stdout.readline().split()[0] == str(sweep.index)  # beside the sweep
        measuring = device_slots.claim(device_slots.MEASURING, environ=_environ(tmp_path, 2))
        assert measuring.index != sweep.index  # the sweep's GPU is not whole
        second = _holder(tmp_path, 2, device_slots.WARM, 0)  # each GPU holds a job that excludes it
        with pytest.raises(subprocess.TimeoutExpired):
            second.communicate(timeout=3)
        for fh in measuring.files:
            fh.close()
        assert second.communicate(timeout=60)[0].split()[0] == str(measuring.index)
    finally:
        warm.kill()
        warm.wait()
        for fh in sweep.files:
            fh.close()


def test_a_killed_jobs_gpu_is_free_again(tmp_path):
    job = _holder(tmp_path, 1, device_slots.MEASURING, 60)
    assert job.stdout.readline().split()[0] == "0"
    job.send_signal(signal.SIGKILL)
    job.wait()
    assert device_slots.claim(device_slots.MEASURING, environ=_environ(tmp_path, 1)).index == 0


def test_more_gpus_than_cuda_visible_devices_names_is_refused():
    with pytest.raises(device_slots.DeviceError, match="names 1 GPU"):
        device_slots.claim(device_slots.MEASURING, environ={**_environ(Path("/tmp"), 2),
                                                          "CUDA_VISIBLE_DEVICES": "3"})


# ---- the workflow ------------------------------------------------------------------------------
def _with_config(root: Path, **gpu) -> None:
    path = root / "config" / "tiny.yaml"
    tiny = yaml.safe_load(path.read_text())
    for key, value in gpu.items():
        tiny.setdefault("gpu", {}).setdefault(key, {}).update(value)
    path.write_text(yaml.safe_dump(tiny, sort_keys=False))  # params compare in their order


def _jobs(said: str, rule: str) -> list[str]:
    """The wildcards of each job of `rule` a Snakemake console announces."""
    return [line.split(f"rule {rule} (", 1)[1].split(")")[0] for line in said.splitlines()
            if f"rule {rule} (" in line]


def test_a_second_run_from_nothing_with_a_stage_in_one_shard_gives_the_same_tables(tiny_run, tmp_path):
    """A second project run from nothing, its GPU stages in one shard each where the shared run has
    several: the byte model, the CPU's counts and every gathered GPU table are the same byte for
    byte, each stage from the same seed."""
    assert len(list((tiny_run.root / "results/gpu/timing/shards").iterdir())) > 1  # the shared run's
    one = copy_project(tmp_path / "one")
    _with_config(one, shards={"correctness": [], "timing": [], "bytes": []})
    made = ("results/" + contract.manifest("symbolic"), "results/" + contract.manifest("cpu_bytes"))
    proc = snakemake(one, *TARGETS, *made)
    said = proc.stdout + proc.stderr
    for rule in ("gpu_correctness_shard", "gpu_timing_shard", "gpu_bytes_shard"):
        assert _jobs(said, rule) == ["shard=all"], rule
    symbolic = (contract.SYMBOLIC_BYTES, contract.SYMBOLIC_FORMULAS, contract.SYMBOLIC_LAB_TABLE)
    for table in (*GATHERED, *symbolic):
        if table != contract.TIMING_SUMMARY:
            pair = [(root / "results" / table).read_bytes() for root in (one, tiny_run.root)]
            assert pair[0] == pair[1], table
    # the timing summary too, but for its prediction from the CPU's measured ceilings
    summaries = [json.loads((root / "results" / contract.TIMING_SUMMARY).read_text())
                 for root in (one, tiny_run.root)]
    for summary in summaries:
        assert summary.pop("lab01_prediction_from_cpu_ceilings")["N"] > 0
    assert summaries[0] == summaries[1]
    counted = ["bytes_model", "bytes_instrumented", "bytes_read", "bytes_written", "bytes_profiler"]
    cpu = [pd.read_csv(root / "results" / contract.CPU_BYTES)[counted] for root in (one, tiny_run.root)]
    pd.testing.assert_frame_equal(*cpu)  # counted bytes (their times are the machine's)
    seeds = {json.loads((root / "results" / contract.manifest("gpu_correctness")).read_text())
             ["params"]["random_seed"] for root in (one, tiny_run.root)}
    assert seeds == {0}
    assert "Nothing to be done" in (lambda p: p.stdout + p.stderr)(snakemake(one, "-n", *TARGETS, *made))


def _manifests(root: Path, rule: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in reading.find_manifests(root / "results")
            if json.loads(p.read_text())["rule"] == rule]


def test_two_gpus_of_one_host_run_two_shards_at_once_on_distinct_gpus(tiny_run, tmp_path):
    root = copy_of_tiny_run(tiny_run, tmp_path / "two")
    snakemake(root, "--resources", "gpu=2", "gpu_measure=2", "--forcerun", "gpu_timing_shard", "decode_gpu",
              *TARGETS, "results/" + contract.manifest("decode_gpu"))

    def spans(rule):
        return [(m["extra"]["gpu_slot"]["index"], m["started"], m["finished"], m["extra"]["gpu_slot"])
                for m in _manifests(root, rule)]

    def overlapping(jobs):
        return [(a, b) for i, a in enumerate(jobs) for b in jobs[i + 1:] if a[1] < b[2] and b[1] < a[2]]

    timed = spans("gpu_timing_shard")
    assert len(timed) == len(list((root / "results/gpu/timing/shards").iterdir()))
    # a measuring job tries GPU 0 first, so one on GPU 1 ran while another held GPU 0 (the
    # manifests' times, to the second, cannot show two jobs of under a second overlapping)
    assert {s[3]["cuda_visible_devices"] for s in timed} == {"0", "1"}, timed
    # every measuring job (decode_gpu too) holds both slots of its GPU: none beside another on it
    measuring = timed + spans("decode_gpu")
    assert {tuple(s[3]["slots"]) for s in measuring} == {device_slots.MEASURING}
    assert all(a[0] != b[0] for a, b in overlapping(measuring)), overlapping(measuring)
    for table in ("gpu/timing/timing.csv", "gpu/timing/samples.csv"):
        assert (root / "results" / table).read_bytes() == (tiny_run.root / "results" / table).read_bytes()


def _descendants(pid: int) -> list[tuple[int, str]]:
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        # a process's children are listed by the thread that started them: every thread's
        for listed in Path(f"/proc/{parent}/task").glob("*/children"):
            try:
                for child in listed.read_text().split():
                    cmdline = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ")
                    found.append((int(child), cmdline.decode("utf-8", "replace")))
                    todo.append(int(child))
            except OSError:  # it ended meanwhile
                continue
    return found


def _holds_open(pid: int, path: Path) -> bool:
    """Whether process `pid` has `path` open (a stage keeps its rule's log open while it runs)."""
    try:
        return any(os.path.realpath(fd) == os.path.realpath(path) for fd in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:  # it ended meanwhile
        return False


def test_a_shard_killed_mid_run_is_the_only_one_run_again(tiny_run, tmp_path):
    root = copy_of_tiny_run(tiny_run, tmp_path / "killed")
    victim = "flashattention-d64-forward"
    (root / f"results/logs/gpu_timing_shard/{victim}.log").unlink()  # made again as the shard starts
    # its outputs gone, and the gather's manifest, as in a first run that never ended: wherever the
    # kill lands (a shard without a GPU takes under a second), the victim leaves no output, and
    # the next run must make it and gather the shards (Snakemake makes a missing file again only
    # where a job that needs it runs)
    for made in [*(root / f"results/gpu/timing/shards/{victim}").iterdir(),
                 root / "results" / contract.manifest("gpu_timing")]:
        made.unlink()
    log = root / f"results/logs/gpu_timing_shard/{victim}.log"
    run = subprocess.Popen([sys.executable, "-m", "snakemake", "--cores", "1", "--configfile",
                            str(root / "config" / "tiny.yaml"), "--forcerun", "gpu_timing_shard", *TARGETS],
                           cwd=root, env=user_env(), stdout=(tmp_path / "console").open("w"),
                           stderr=subprocess.STDOUT)
    deadline, killed = time.monotonic() + 240, None
    while killed is None and time.monotonic() < deadline and run.poll() is None:
        for pid, cmdline in _descendants(run.pid):
            # the shard's own process (not the shell that starts it) that holds the victim's log open
            if "gpu_timing_shard.py" in cmdline and "python" in cmdline.split()[0] and _holds_open(pid, log):
                os.kill(pid, signal.SIGKILL)
                killed = pid
                break
        time.sleep(0.05)
    run.wait(timeout=240)
    said = (tmp_path / "console").read_text()
    assert killed is not None and run.returncode != 0, said[-3000:]
    again = snakemake(root, *TARGETS)
    assert _jobs(again.stdout + again.stderr, "gpu_timing_shard") == [f"shard={victim}"]
    for table in ("gpu/timing/timing.csv", "gpu/timing/samples.csv"):
        assert (root / "results" / table).read_bytes() == (tiny_run.root / "results" / table).read_bytes()


def test_changing_one_shards_points_runs_that_shard_and_the_gather_again(tiny_run, tmp_path):
    root = copy_of_tiny_run(tiny_run, tmp_path / "changed")
    _with_config(root, timing={"lab_n": [128]})  # the lab grid's one N: its shards' points alone
    said = (lambda p: p.stdout + p.stderr)(snakemake(root, "-n", "--", "results/gpu/timing/manifest.json"))
    lab = {f"shard={name}" for name in shards.plan("timing", {**CONFIG["timing"], "fa_n": []},
                                                     CONFIG["shards"]["timing"])}
    assert set(_jobs(said, "gpu_timing_shard")) == lab and "rule gpu_timing:" in said


# ---- what it buys --------------------------------------------------------------------------------
def test_the_estimate_places_the_jobs_as_the_workflow_runs_them():
    assert shards_estimate.schedule(1, 10, {"sweep": 10}, {"t": 5}, {}) == 15  # the warm-up beside the sweep
    assert shards_estimate.schedule(2, 0, {}, {"x": 5, "y": 5}, {}) == 5  # two GPUs: side by side
    assert shards_estimate.schedule(1, 0, {}, {"x": 5, "y": 5}, {"b": 1}) == 11  # one: one after another
    # no shard waits for the sweep: a timing shard runs beside it on another GPU
    assert shards_estimate.schedule(2, 0, {"sweep": 10}, {"x": 5}, {}) == 10
    # a timing shard that starts before the warm-up ends compiles its own first calls
    assert shards_estimate.schedule(2, 4, {"sweep": 1}, {"x": 5}, {}, {"x": 3}) == 5 + 3
    assert shards_estimate.schedule(1, 1, {"sweep": 2}, {"x": 5}, {}, {"x": 3}) == 2 + 5


def test_the_estimate_of_the_reference_falls_with_more_gpus():
    table = shards_estimate.estimate(ROOT / "results/reference/nvidia-h200", configcheck.load_config())
    assert list(table["GPUs"]) == list(shards_estimate.GPUS)
    assert table["wall_s"].is_monotonic_decreasing and table["wall_s"].min() >= table["longest_job_s"].max()


def test_the_estimate_of_a_run_made_in_shards_takes_the_wall_times_they_recorded(tiny_run):
    run = tiny_run.root / "results"
    walls = [json.loads(p.read_text())["wall_s"] for p in run.glob("gpu/*/shards/*/shard.json")]
    assert walls
    measuring = sum(json.loads(p.read_text())["wall_s"] for p in [*run.glob("gpu/timing/shards/*/shard.json"),
                                                                  *run.glob("gpu/bytes/shards/*/shard.json")])
    table = shards_estimate.estimate(run, configcheck.load_config())
    assert table["unsharded_one_gpu_s"].isna().all()  # no unsharded stage ran: none is made up
    assert table["longest_job_s"].iloc[0] >= round(max(walls))
    assert table["wall_s"].iloc[0] >= round(measuring)  # one GPU: the measuring shards one after another
