"""The workflow submitted through workflow/profiles/slurm to a real one-node SLURM cluster.

Everything is submitted by `make_slurm_runs`, from the session's start, beside the other tests
(conftest's `background`: the runs mostly wait on SLURM); the tests read what each step did.
It starts a munged, slurmctld and slurmd of its own from Debian's packages (`.ci/run`
installs them), everything under a temporary folder: the configuration (SLURM_CONF points the
daemons and every client at it), the state, spool, pid and log files, munged's key and socket,
on TCP ports free at the time. Two runs on one host do not touch each other, nor a real SLURM
or munge installation. The configuration is one node for this host: a `cpu` partition (the
default) and a `gpu` partition, the node carrying one fake GPU (a character device: SLURM hands
it out, torch finds no CUDA behind it). The node's size is taken from the configuration
(`config_overrides`), so the profile's requests fit as written. No accounting database: status
comes from squeue, which keeps finished jobs for MinJobAge seconds. Without SLURM or root the
test skips, except under CI, where a skip is a failure.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

import pandas as pd
import pytest
from conftest import background, copy_project

from minimodel.floor.provenance import manifest

DAEMONS = ("slurmctld", "slurmd")
TOOLS = ("munged", "mungekey", "munge", "unmunge", "slurmctld", "slurmd", "sbatch", "srun",
         "squeue", "scontrol", "sinfo")
GPU_MODEL = "testgpu"  # the fake GPUs' model, as gres.conf names it
GPUS = 2  # the node's fake GPUs: two GPU jobs (the GPU stages' shards) run at once
LOCAL_RULES = ("symbolic", "cpu_bytes", "gpu_correctness", "gpu_timing", "gpu_bytes", "plots", "readme",
               "verify")
# each GPU job of the run (config/few_shards.yaml): rule -> its shards (None: a rule of one job)
GPU_JOBS = {"gpu_correctness_shard": ("all",), "gpu_warm": None,
            "gpu_timing_shard": ("forward", "backward", "fwd_bwd"), "gpu_bytes_shard": ("all",)}
pytestmark = pytest.mark.workflow


def _unavailable() -> str | None:
    missing = [t for t in TOOLS if not shutil.which(t)]
    if missing:
        return f"SLURM is not installed (missing {', '.join(missing)}; .ci/run installs it)"
    if os.geteuid() != 0:
        return "starting SLURM's daemons needs root"
    return None


def _run(*cmd, check=True, timeout=60, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=timeout, **kw)


def _wait(what: str, ready, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.5)
    raise TimeoutError(f"{what} not ready after {timeout:.0f} s")


def _free_ports(count: int) -> list[int]:
    """Ports no one listens on now: bound together (so they differ), then let go for the daemons."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _munge_works(sock: Path) -> bool:
    try:
        encoded = _run("munge", "-S", str(sock), "-n", check=False, timeout=10).stdout
        return _run("unmunge", "-S", str(sock), input=encoded, check=False, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _stop(pidfile: Path) -> None:
    try:
        pid = int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)


def _slurm_conf(state: Path, host: str, ports: list[int], munge_socket: Path) -> str:
    return f"""# minimodel test cluster (tests/test_slurm.py), in {state}
ClusterName=minimodel-test
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ports[0]}
SlurmdPort={ports[1]}
AuthType=auth/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={state}/ctld
SlurmdSpoolDir={state}/spool
SlurmctldPidFile={state}/slurmctld.pid
SlurmdPidFile={state}/slurmd.pid
SlurmctldLogFile={state}/slurmctld.log
SlurmdLogFile={state}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
MinJobAge=300
GresTypes=gpu
NodeName={host} CPUs=16 RealMemory=64000 Gres=gpu:{GPU_MODEL}:{GPUS} State=UNKNOWN
PartitionName=cpu Nodes={host} Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes={host} MaxTime=INFINITE State=UP
"""


def _start_munged(folder: Path) -> Path:
    """A munged of this cluster's own: its key, socket, pid and log in `folder`.

    Root runs everything here; --force lets munged serve a socket that only root can reach.
    """
    folder.mkdir(mode=0o700)
    key, sock = folder / "munge.key", folder / "munge.socket"
    _run("mungekey", "--create", f"--keyfile={key}")
    _run("munged", "--force", f"--socket={sock}", f"--key-file={key}", f"--pid-file={folder}/munged.pid",
         f"--log-file={folder}/munged.log", f"--seed-file={folder}/munged.seed")
    _wait("munged", lambda: _munge_works(sock), 20)
    return sock


@contextlib.contextmanager
def cluster(state: Path):
    """A running one-node SLURM cluster in the folder `state`, as the environment that reaches it
    (SLURM_CONF); its daemons are stopped by their pid files afterwards."""
    host = socket.gethostname().split(".")[0]
    gpu_devices = [state / f"fake-gpu{i}" for i in range(GPUS)]
    for device in gpu_devices:
        _run("mknod", str(device), "c", "1", "3")  # a copy of /dev/null: gres needs a device
    conf = state / "slurm.conf"
    # The plugin's job step runs the rule through `srun`, but first drops every SLURM_* variable
    # but a few (snakemake-executor-plugin-slurm-jobstep 0.6.1), SLURM_CONF too: a real cluster's
    # srun finds /etc/slurm/slurm.conf, this one's is told by a wrapper first on PATH.
    wrappers = state / "bin"
    wrappers.mkdir()
    (wrappers / "srun").write_text(f'#!/bin/sh\nSLURM_CONF={conf} exec {shutil.which("srun")} "$@"\n')
    (wrappers / "srun").chmod(0o755)
    env = {**os.environ, "SLURM_CONF": str(conf),  # gres.conf is read beside slurm.conf
           "PATH": f"{wrappers}{os.pathsep}{os.environ['PATH']}"}
    try:
        munge_socket = _start_munged(state / "munge")
        conf.write_text(_slurm_conf(state, host, _free_ports(2), munge_socket))
        (state / "gres.conf").write_text("".join(f"Name=gpu Type={GPU_MODEL} File={device}\n"
                                                 for device in gpu_devices))
        for daemon in DAEMONS:
            _run(daemon, "-f", str(conf), env=env)
        _wait("the node", lambda: _run("sinfo", "-h", "-o", "%T", check=False, env=env).stdout.split()
              [:1] == ["idle"], 60)
        yield env
    finally:
        for daemon in reversed(DAEMONS):
            _stop(state / f"{daemon}.pid")
        _stop(state / "munge" / "munged.pid")


def _copy_tree(root: Path) -> Path:
    # no comparison with the reference: its two local rules are test_workflow's, not the profile's;
    # one dtype of the CPU's bytes: one cpu_bytes_part job through sbatch says what two would
    return copy_project(root, ("no_gpu_needed.yaml", "gpu:\n  require_cuda: false\n"),
                        ("no_compare.yaml", "compare:\n  reference: null\n"),
                        ("one_dtype.yaml", "cpu:\n  dtypes: [float32]\n"),
                        # shards of the GPU stages: one each, but for three of the timing
                        ("few_shards.yaml", "gpu:\n  shards:\n    correctness: []\n    timing: [direction]\n"
                                            "    bytes: []\n"))


def _snakemake(workdir: Path, env: dict, *args, timeout=900):
    """Snakemake as a user starts it on the cluster's login node (SLURM_CONF in `env`)."""
    env = {k: v for k, v in env.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET")}
    proc = subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=timeout)
    return proc, proc.stdout + proc.stderr


# Options that only make this small test quicker.
QUICK = ("--slurm-init-seconds-before-status-checks", "2", "--seconds-between-status-checks", "2")
# What docs/cluster.md says to run on a cluster without an accounting database.
SLURM_ARGS = ("--workflow-profile", "workflow/profiles/slurm", "--slurm-status-command", "squeue",
              *QUICK)
CONFIGS = ("--configfile", "config/tiny.yaml", "config/no_gpu_needed.yaml", "config/no_compare.yaml",
           "config/one_dtype.yaml", "config/few_shards.yaml")
# one shard's job, forced again in the reruns below: its rule as the plugin's comment names it
TIMING_SHARD = "gpu_timing_shard_wildcards_forward"
FORCE_TIMING_SHARD = ("--forcerun", "results/gpu/timing/shards/forward/shard.json", "--",
                      "results/gpu/timing/manifest.json")


def _jobs(env: dict) -> list[dict]:
    """Every job slurmctld still holds (finished ones for MinJobAge), as key=value fields.

    The plugin's comment names the rule ("rule_<name>", then "_wildcards_..." if it has any).
    """
    lines = _run("scontrol", "show", "job", "-o", env=env).stdout.splitlines()
    jobs = [dict(f.split("=", 1) for f in line.split() if "=" in f) for line in lines if line.strip()]
    for job in jobs:
        job["rule"] = job.get("Comment", "").removeprefix("rule_").split("_wildcards")[0]
    return jobs


def _sbatch(said: str, rule: str, workdir: Path) -> str:
    """The sbatch options the plugin used for `rule` (--verbose prints them), its job name masked
    (a random name per run), and the folder it ran in (its log's and its job's)."""
    lines = [line for line in said.splitlines()
             if "sbatch call:" in line and f"--comment rule_{rule} " in line]
    assert len(lines) == 1, f"{rule}: {len(lines)} sbatch calls"
    options = lines[0].split("sbatch call:")[1].split("--wrap")[0].replace(str(workdir), "WORKDIR")
    return " ".join(re.sub(r"--job-name \S+", "--job-name NAME", options).split())


def _rerun_gpu_timing(workdir: Path, env: dict, *profile_args):
    return _snakemake(workdir, env, *profile_args, "--slurm-status-command", "squeue", *QUICK, "--verbose",
                      *CONFIGS, *FORCE_TIMING_SHARD)


def _ran(proc_said) -> dict:
    proc, said = proc_said
    return {"returncode": proc.returncode, "said": said}


def _as_profile(reruns: Path, env: dict) -> dict:
    submitted = len(_jobs(env))
    return {**_ran(_rerun_gpu_timing(reruns, env, "--profile", "workflow/profiles/slurm")),
            "submitted_before": submitted, "submitted_after": len(_jobs(env))}


def _options(reruns: Path, env: dict) -> dict:
    """The profile's OPTION lines switched on, as a user would: gpu_model and --exclusive."""
    shipped = (reruns / "workflow" / "profiles" / "slurm" / "config.yaml").read_text()
    options = shipped.replace('# gpu_model: "h200"', f'gpu_model: "{GPU_MODEL}"').replace(
        '# slurm_extra: "--exclusive"', 'slurm_extra: "--exclusive"')
    (reruns / "workflow" / "profiles" / "slurm_options").mkdir()
    (reruns / "workflow" / "profiles" / "slurm_options" / "config.yaml").write_text(options)
    ran = _ran(_snakemake(reruns, env, "--workflow-profile", "workflow/profiles/slurm_options",
                          "--slurm-status-command", "squeue", *QUICK, "--verbose", *CONFIGS, "--forcerun",
                          "results/gpu/timing/shards/forward/shard.json",
                          "results/gpu/bytes/shards/all/shard.json", "--", "results/gpu/timing/manifest.json",
                          "results/gpu/bytes/manifest.json"))
    return {**ran, "shipped": shipped, "options": options, "jobs": _jobs(env)}


def _second_cluster(state: Path, first: dict) -> dict:
    jobs = len(_jobs(first))
    state.mkdir()
    with cluster(state) as second:
        _run("sbatch", "--comment", "second_cluster", "--wrap", "true", env=second)
        comments = [j["Comment"] for j in _jobs(second)]
    return {"conf": second["SLURM_CONF"], "comments": comments, "submitted_before": jobs,
            "submitted_after": len(_jobs(first)), "first_conf_is_file": Path(first["SLURM_CONF"]).is_file()}


def _no_usable_gpu(reruns: Path, env: dict) -> dict:
    # gpu.require_cuda left at its default: inside a SLURM job given a GPU, a GPU is demanded
    ran = _ran(_snakemake(reruns, env, *SLURM_ARGS, "--configfile", "config/tiny.yaml",
                          "config/few_shards.yaml", "--forcerun", "gpu_correctness_shard", "--until",
                          "gpu_correctness"))
    log = reruns / "results" / "logs" / "gpu_correctness_shard" / "all.log"
    made = reruns / "results" / "gpu" / "correctness" / "shards" / "all" / "manifest.json"
    return {**ran, "log": log.read_text() if log.exists() else None, "manifest_left": made.exists()}


def make_slurm_runs(folder: Path) -> dict:
    """Everything the tests below read, in their order, on one cluster in `folder`: the tiny config
    through the SLURM profile (in on_slurm/, left as that run left it), then, in a copy of that
    run (reruns/), gpu_timing again with the profile given as --profile, alone and beside the
    default one, then with the profile's options, a second cluster beside the first, and a GPU job
    on a node without a usable GPU. Each step is kept as it went (its exit status and console, or
    its exception), so that a test fails for its own step."""
    reason = _unavailable()
    if reason:
        if os.environ.get("CI") == "true":
            raise RuntimeError(f"the SLURM test must run under CI: {reason}")
        return {"skip": reason}
    (folder / "cluster").mkdir()
    found = {}
    with cluster(folder / "cluster") as env:
        found["slurm_conf"] = env["SLURM_CONF"]
        on_slurm = _copy_tree(folder / "on_slurm")
        started = time.monotonic()
        found["main"] = _ran(_snakemake(on_slurm, env, *SLURM_ARGS, "--verbose", *CONFIGS))
        found["main"].update(seconds=time.monotonic() - started, jobs=_jobs(env))
        if found["main"]["returncode"]:
            return found
        reruns = shutil.copytree(on_slurm, folder / "reruns", symlinks=True)
        steps = {"as_profile": lambda: _as_profile(reruns, env),
                 "as_profile_alone": lambda: _ran(_rerun_gpu_timing(
                     reruns, env, "--profile", "workflow/profiles/slurm", "--workflow-profile", "none")),
                 "options": lambda: _options(reruns, env),
                 "second_cluster": lambda: _second_cluster(folder / "second", env),
                 "no_usable_gpu": lambda: _no_usable_gpu(reruns, env)}
        for name, step in steps.items():
            try:
                found[name] = step()
            except Exception:
                found[name] = {"error": traceback.format_exc()}
    return found


# under CI a missing SLURM fails the tests (make_slurm_runs raises); elsewhere they skip
slurm_runs = background("slurm_runs", make_slurm_runs)


def _step(slurm_runs, name: str, succeeded: bool | None = True) -> dict:
    """What step `name` of `make_slurm_runs` found; its Snakemake exited 0 (`succeeded`), or not."""
    step = slurm_runs[1].get(name)
    assert step is not None, f"step {name} never ran: {slurm_runs[1]['main']['said'][-6000:]}"
    assert "error" not in step, step.get("error")
    if succeeded is not None:
        assert (step["returncode"] == 0) == succeeded, step["said"][-6000:]
    return step


@pytest.fixture
def main_run(slurm_runs) -> dict:
    """The tiny config through the SLURM profile: its console, the jobs slurmctld held after it
    and its folder."""
    main = _step(slurm_runs, "main")
    print(f"workflow through SLURM: {main['seconds']:.0f} s")
    for rule, shards in GPU_JOBS.items():
        print(_sbatch(main["said"], rule if shards is None else f"{rule}_wildcards_{shards[0]}",
                      slurm_runs[0] / "on_slurm"))
    return {**main, "folder": slurm_runs[0] / "on_slurm"}


def test_gpu_rules_went_through_sbatch_asking_for_a_gpu(main_run):
    for rule, shards in GPU_JOBS.items():
        jobs = [j for j in main_run["jobs"] if j["rule"] == rule]
        assert len(jobs) == len(shards or (None,)), f"{rule}: {len(jobs)} SLURM jobs"
        for shard in shards or (None,):
            (job,) = [j for j in jobs if shard is None or j["Comment"].endswith(f"_wildcards_{shard}")]
            assert job["JobState"] == "COMPLETED" and job["Partition"] == "gpu"
            assert "gpu:1" in job.get("TresPerJob", ""), job
            stage = main_run["folder"] / "results" / "gpu" / rule.split("_")[1]
            m = manifest.load_manifest(stage / ("manifest.json" if shard is None
                                                else f"shards/{shard}/manifest.json"))
            assert m["environment"]["slurm"]["job_id"] == job["JobId"]
            assert m["environment"]["slurm"]["partition"] == "gpu"
            assert m["environment"]["host"] == socket.gethostname()
    for rule in ("cpu_bytes_part", "cpu_roofline"):
        assert any(j["rule"] == rule for j in main_run["jobs"]), rule


def test_light_rules_ran_on_the_submitting_host(main_run):
    submitted = {j["rule"] for j in main_run["jobs"]}
    assert submitted == {"cpu_bytes_part", "cpu_roofline", "decode_cpu", "decode_gpu", *GPU_JOBS}
    for rule in LOCAL_RULES:
        assert f"localrule {rule}:" in main_run["said"]
    symbolic = manifest.load_manifest(main_run["folder"] / "results" / "symbolic" / "manifest.json")
    assert symbolic["environment"]["slurm"] is None


def test_results_equal_those_of_a_local_run(main_run, tiny_run):
    runs = {"slurm": main_run["folder"], "local": tiny_run.root}  # the session's shared run, read only
    for table in ("symbolic/bytes.csv", "symbolic/formulas.csv", "symbolic/lab_table.txt"):
        assert (runs["slurm"] / "results" / table).read_bytes() == \
            (runs["local"] / "results" / table).read_bytes(), table
    cpu = [pd.read_csv(runs[k] / "results" / "cpu" / "bytes.csv") for k in ("slurm", "local")]
    assert set(cpu[0]["dtype"]) == {"float32"}  # config/one_dtype.yaml: the local run's float32 rows
    cpu[1] = cpu[1][cpu[1]["dtype"] == "float32"].reset_index(drop=True)
    counted = ["scheme", "N", "d", "dtype", "bytes_model", "bytes_instrumented", "bytes_read",
               "bytes_written", "deviation"]
    pd.testing.assert_frame_equal(cpu[0][counted], cpu[1][counted])
    verdicts = [pd.read_csv(runs[k] / "results" / "gpu" / "correctness" / "correctness.csv")
                for k in ("slurm", "local")]
    case = ["N", "d", "causal", "dtype", "skipped", "passed"]
    pd.testing.assert_frame_equal(verdicts[0][case], verdicts[1][case])
    assert verdicts[0]["backend"].eq("interpreter").all()  # require_cuda off: the honest fallback


def test_gpu_timing_gets_the_cpus_of_its_set_threads(main_run):
    assert "--cpus-per-task=8" in _sbatch(main_run["said"], TIMING_SHARD, main_run["folder"]).split()


def test_the_profile_given_as_profile_is_refused_before_any_job(slurm_runs):
    # Snakemake would load workflow/profiles/default beside it (cores: all, resources: gpu=1)
    step = _step(slurm_runs, "as_profile", succeeded=False)
    assert "workflow/profiles/slurm came with --profile" in step["said"]
    assert "Run `snakemake --workflow-profile workflow/profiles/slurm`" in step["said"]
    assert "sbatch call:" not in step["said"] and step["submitted_after"] == step["submitted_before"]


def test_the_profile_given_as_profile_without_the_default_one_submits_the_same_job(slurm_runs, main_run):
    step = _step(slurm_runs, "as_profile_alone")
    alone = _sbatch(step["said"], TIMING_SHARD, slurm_runs[0] / "reruns")
    print(alone)
    assert alone == _sbatch(main_run["said"], TIMING_SHARD, main_run["folder"])


def test_the_profiles_options_ask_for_one_gpu_model_and_the_whole_node(slurm_runs):
    step = _step(slurm_runs, "options")
    # the two OPTION lines, and nothing else, switched on
    assert sum(a != b for a, b in zip(step["options"].splitlines(), step["shipped"].splitlines(),
                                      strict=True)) == 2
    for rule in (TIMING_SHARD, "gpu_bytes_shard_wildcards_all"):
        sbatch = _sbatch(step["said"], rule, slurm_runs[0] / "reruns")
        print(sbatch)
        assert "--exclusive" in sbatch.split() and f"--gpus={GPU_MODEL}:1" in sbatch.split()
        # this run's, the latest
        job = [j for j in step["jobs"] if j["rule"] == rule.split("_wildcards")[0]][-1]
        assert job["JobState"] == "COMPLETED"
        assert job["OverSubscribe"] == "NO" and job["NumCPUs"] == "16", job  # the whole node
        assert f"gpu:{GPU_MODEL}:1" in job["TresPerJob"], job


def test_a_second_cluster_on_this_host_leaves_the_first_alone(slurm_runs):
    step = _step(slurm_runs, "second_cluster", succeeded=None)
    assert step["conf"] != slurm_runs[1]["slurm_conf"]
    assert step["comments"] == ["second_cluster"]
    # the first still answers (its munged too), its jobs its own
    assert step["submitted_after"] == step["submitted_before"] and step["first_conf_is_file"]


def test_a_gpu_job_without_a_usable_gpu_fails_naming_the_node(slurm_runs):
    step = _step(slurm_runs, "no_usable_gpu", succeeded=False)
    assert step["log"] is not None, step["said"][-6000:]
    assert f"node {socket.gethostname()} (SLURM job" in step["log"]
    assert "has no usable GPU: torch" in step["log"]
    assert not step["manifest_left"]
