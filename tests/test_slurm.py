"""The workflow submitted through workflow/profiles/slurm to a real one-node SLURM cluster.

The fixture starts munge, slurmctld and slurmd from Debian's packages (`.ci/run` installs them)
with a one-node configuration for this host: a `cpu` partition (the default) and a `gpu`
partition, the node carrying one fake GPU (a character device: SLURM hands it out, torch finds
no CUDA behind it). The node's size is taken from the configuration (`config_overrides`), so the
profile's requests fit as written. No accounting database: status comes from squeue, which keeps
finished jobs for MinJobAge seconds. Without SLURM or root the test skips, except under CI,
where a skip is a failure.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import copy_project

from minimodel.provenance import manifest

MARK = "# minimodel test cluster (tests/test_slurm.py)"
SLURM_DIR = Path("/etc/slurm")
DAEMONS = ("slurmctld", "slurmd")
TOOLS = ("munged", "munge", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo")
LOCAL_RULES = ("symbolic", "cpu_bytes", "plots", "readme", "verify")
pytestmark = pytest.mark.workflow


def _unavailable() -> str | None:
    missing = [t for t in TOOLS if not shutil.which(t)]
    if missing:
        return f"SLURM is not installed (missing {', '.join(missing)}; .ci/run installs it)"
    if os.geteuid() != 0:
        return "starting SLURM's daemons needs root"
    conf = SLURM_DIR / "slurm.conf"
    if conf.exists() and MARK not in conf.read_text():
        return f"{conf} belongs to a real SLURM installation; the test would replace it"
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


def _munge_works() -> bool:
    try:
        encoded = _run("munge", "-n", check=False, timeout=10).stdout
        return _run("unmunge", input=encoded, check=False, timeout=10).returncode == 0
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


def _slurm_conf(state: Path, host: str, gpu_device: Path) -> str:
    return f"""{MARK}
ClusterName=minimodel-test
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
SlurmctldPort=16817
SlurmdPort=16818
AuthType=auth/munge
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
NodeName={host} CPUs=16 RealMemory=64000 Gres=gpu:1 State=UNKNOWN
PartitionName=cpu Nodes={host} Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes={host} MaxTime=INFINITE State=UP
"""


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    """A running one-node SLURM cluster; its daemons are stopped by their pid files afterwards."""
    reason = _unavailable()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the SLURM test must run under CI: {reason}")
        pytest.skip(reason)
    state = tmp_path_factory.mktemp("slurm")
    host = socket.gethostname().split(".")[0]
    gpu_device = state / "fake-gpu0"
    _run("mknod", str(gpu_device), "c", "1", "3")  # a copy of /dev/null: gres needs a device
    started_munge = False
    if not _munge_works():
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        _run("runuser", "-u", "munge", "--", "munged")
        started_munge = True
        _wait("munged", _munge_works, 20)
    SLURM_DIR.mkdir(exist_ok=True)
    (SLURM_DIR / "slurm.conf").write_text(_slurm_conf(state, host, gpu_device))
    (SLURM_DIR / "gres.conf").write_text(f"{MARK}\nName=gpu File={gpu_device}\n")
    try:
        for daemon in DAEMONS:
            _run(daemon)
        _wait("the node", lambda: _run("sinfo", "-h", "-o", "%T", check=False).stdout.split()
              [:1] == ["idle"], 60)
        yield {"host": host, "state": state}
    finally:
        for daemon in reversed(DAEMONS):
            _stop(state / f"{daemon}.pid")
        if started_munge:
            _stop(Path("/run/munge/munged.pid"))
        for name in ("slurm.conf", "gres.conf"):
            conf = SLURM_DIR / name
            if conf.exists() and MARK in conf.read_text():
                conf.unlink()


def _copy_tree(root: Path) -> Path:
    return copy_project(root, ("no_gpu_needed.yaml", "gpu:\n  require_cuda: false\n"))


def _snakemake(workdir: Path, *args, timeout=900):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET")}
    proc = subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=timeout)
    return proc, proc.stdout + proc.stderr


# What the README's cluster section says to run on a cluster without an accounting database; the
# last two options only make this small test quicker.
SLURM_ARGS = ("--workflow-profile", "workflow/profiles/slurm", "--slurm-status-command", "squeue",
              "--slurm-init-seconds-before-status-checks", "2", "--seconds-between-status-checks", "2")


def _jobs() -> list[dict]:
    """Every job slurmctld still holds (finished ones for MinJobAge), as key=value fields.

    The plugin's comment names the rule ("rule_<name>", then "_wildcards_..." if it has any).
    """
    lines = _run("scontrol", "show", "job", "-o").stdout.splitlines()
    jobs = [dict(f.split("=", 1) for f in line.split() if "=" in f) for line in lines if line.strip()]
    for job in jobs:
        job["rule"] = job.get("Comment", "").removeprefix("rule_").split("_wildcards")[0]
    return jobs


@pytest.fixture(scope="module")
def runs(slurm_cluster, tmp_path_factory):
    """The tiny config through the SLURM profile, and the same config run locally."""
    on_slurm = _copy_tree(tmp_path_factory.mktemp("on_slurm"))
    started = time.monotonic()
    proc, said = _snakemake(on_slurm, *SLURM_ARGS, "--verbose", "--configfile", "config/tiny.yaml",
                            "config/no_gpu_needed.yaml")
    seconds = time.monotonic() - started
    assert proc.returncode == 0, said[-6000:]
    print(f"workflow through SLURM: {seconds:.0f} s")
    for line in said.splitlines():
        if "sbatch call:" in line and "rule_gpu" in line:
            print(line.split("--wrap")[0])
    local = _copy_tree(tmp_path_factory.mktemp("local"))
    proc, out = _snakemake(local, "--cores", "2", "--configfile", "config/tiny.yaml", "--until",
                           "symbolic", "cpu_bytes", "gpu_correctness")
    assert proc.returncode == 0, out[-6000:]
    return {"slurm": on_slurm, "local": local, "said": said, "jobs": _jobs()}


def test_gpu_rules_went_through_sbatch_asking_for_a_gpu(runs):
    for rule in ("gpu_correctness", "gpu_timing", "gpu_bytes"):
        jobs = [j for j in runs["jobs"] if j["rule"] == rule]
        assert len(jobs) == 1, f"{rule}: {len(jobs)} SLURM jobs"
        job = jobs[0]
        assert job["JobState"] == "COMPLETED" and job["Partition"] == "gpu"
        assert "gpu:1" in job.get("TresPerJob", ""), job
        m = manifest.load_manifest(runs["slurm"] / "results" / "gpu" / rule.split("_")[1]
                                   / "manifest.json")
        assert m["environment"]["slurm"]["job_id"] == job["JobId"]
        assert m["environment"]["slurm"]["partition"] == "gpu"
        assert m["environment"]["host"] == socket.gethostname()
    for rule in ("cpu_bytes_part", "cpu_roofline"):
        assert any(j["rule"] == rule for j in runs["jobs"]), rule


def test_light_rules_ran_on_the_submitting_host(runs):
    submitted = {j["rule"] for j in runs["jobs"]}
    assert submitted == {"cpu_bytes_part", "cpu_roofline", "gpu_correctness", "gpu_timing", "gpu_bytes"}
    for rule in LOCAL_RULES:
        assert f"localrule {rule}:" in runs["said"]
    symbolic = manifest.load_manifest(runs["slurm"] / "results" / "symbolic" / "manifest.json")
    assert symbolic["environment"]["slurm"] is None


def test_results_equal_those_of_a_local_run(runs):
    for table in ("symbolic/bytes.csv", "symbolic/formulas.csv", "symbolic/lab_table.txt"):
        assert (runs["slurm"] / "results" / table).read_bytes() == \
            (runs["local"] / "results" / table).read_bytes(), table
    cpu = [pd.read_csv(runs[k] / "results" / "cpu" / "bytes.csv") for k in ("slurm", "local")]
    counted = ["scheme", "N", "d", "dtype", "bytes_model", "bytes_instrumented", "bytes_read",
               "bytes_written", "deviation"]
    pd.testing.assert_frame_equal(cpu[0][counted], cpu[1][counted])
    verdicts = [pd.read_csv(runs[k] / "results" / "gpu" / "correctness" / "correctness.csv")
                for k in ("slurm", "local")]
    case = ["N", "d", "causal", "dtype", "skipped", "passed"]
    pd.testing.assert_frame_equal(verdicts[0][case], verdicts[1][case])
    assert verdicts[0]["backend"].eq("interpreter").all()  # require_cuda off: the honest fallback


def test_a_gpu_job_without_a_usable_gpu_fails_naming_the_node(runs):
    # gpu.require_cuda left at its default: inside a SLURM job given a GPU, a GPU is demanded
    proc, said = _snakemake(runs["slurm"], *SLURM_ARGS, "--configfile", "config/tiny.yaml",
                            "--forcerun", "gpu_correctness", "--until", "gpu_correctness")
    assert proc.returncode != 0
    log = (runs["slurm"] / "results" / "logs" / "gpu_correctness.log").read_text()
    assert f"node {socket.gethostname()} (SLURM job" in log
    assert "has no usable GPU: torch" in log
    assert not (runs["slurm"] / "results" / "gpu" / "correctness" / "manifest.json").exists()
