"""Test set-up: the device the kernel tests run on, a copy of the committed reference run for the
comparison's tests, a copy of the project for workflow tests, and one tiny workflow run that the
tests which only read a finished run share.

Without CUDA the kernel runs under Triton's CPU interpreter, switched on here (`minimodel.entry`)
before any test module imports the kernel. The development tools in tools/ are importable by name
(`import tune`), through pytest's `pythonpath` setting in pyproject.toml.

The shared run (`tiny_run`, `snakemake_until`) is made once per session, under pytest-xdist too:
in a folder every worker sees, under a file lock, by the first worker whose tests need it. That
worker starts it in a thread as its first test starts, so the run goes on beside the tests before
the first test that reads it (docs/testing.md). A test that changes a finished run changes a copy
of it (`copy_of_tiny_run`), never the shared one; one that starts Snakemake in the shared run's
folder holds `one_at_a_time(root)` while it runs.

Under pytest-xdist (`make test`: `pytest -n auto`) every test is a unit of its own that any worker
may take, but for the modules of `ONE_WORKER`, whose tests share what a module-scoped fixture
made; those go first, the longest units of work.
"""

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import NamedTuple

import pytest
import torch
from filelock import FileLock

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)

HAS_CUDA = torch.cuda.is_available()

DEVICE = "cuda" if HAS_CUDA else "cpu"
requires_gpu = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")


@pytest.fixture
def gen():
    """A generator with a fresh seed each test, printed so that a failure can be replayed."""
    seed = torch.seed() % 2**63
    print(f"random seed {seed}")
    return torch.Generator().manual_seed(seed)


ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "results" / "reference" / "nvidia-h200"
TINY_CONFIG = "config/tiny.yaml"  # tests/data/tiny_config.yaml, in a copy of the project


@pytest.fixture
def run(tmp_path):
    """A copy of the committed H200 run, to be edited as another run would differ."""
    folder = tmp_path / "run"
    shutil.copytree(REFERENCE, folder)
    return folder


def copy_project(root: Path, *extra_configs: tuple[str, str]) -> Path:
    """The project as a user's checkout holds it (the committed reference run included) in `root`,
    with tests/data/tiny_config.yaml as config/tiny.yaml and (name, text) configs beside it."""
    for name in ("workflow", "scripts", "config", "src", "examples", "results/reference"):
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("environment.yml", "pyproject.toml"):
        shutil.copy(ROOT / name, root / name)
    shutil.copy(ROOT / "tests" / "data" / "tiny_config.yaml", root / TINY_CONFIG)
    for name, text in extra_configs:
        (root / "config" / name).write_text(text)
    return root


def user_env() -> dict:
    """The environment of Snakemake as a user starts it: no PYTHONPATH (the installed minimodel is
    another tree's) and no TRITON_INTERPRET (each rule decides)."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET")}


# Modules whose tests run on one xdist worker, and why. (`--dist loadgroup` would say this with marks,
# but pytest-xdist 3.8 under pytest 9.2 drops the groups and spreads the tests: pytest-xdist#1386.)
ONE_WORKER = {
    "tests/test_slurm.py": "one SLURM cluster and one run of the workflow through it, for the module",
    "tests/test_kernel_report.py": "one process compiles every kernel the module's tests read",
    "tests/test_plots_script.py": "the committed reference's figures, drawn once for two tests",
}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """xdist's load scheduling by scopes: a module of `ONE_WORKER` is one scope, any other test is
    one of its own. Scopes of more tests are sent first."""
    if config.getoption("dist") != "load":
        return None
    # not at the top: pytest-xdist is needed only with -n (the dev extra installs it)
    from xdist.scheduler import LoadScopeScheduling

    class OneWorkerModules(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in ONE_WORKER else nodeid

    return OneWorkerModules(config, log)


class TinyRun(NamedTuple):
    """The shared run: its copy of the project, and the console of `snakemake` there."""
    root: Path
    proc: subprocess.CompletedProcess


class _Shared:
    """The session's one tiny run, in `folder` (seen by every xdist worker): made under the lock
    by the first worker to get there; its console is kept in <folder>/tiny_run.json."""

    def __init__(self, folder: Path):
        self.root = folder / "tiny_run"
        self.said = folder / "tiny_run.json"
        self.lock = FileLock(folder / "tiny_run.lock")
        self.running = FileLock(folder / "tiny_run.snakemake.lock")  # one Snakemake in it at a time
        self.thread: threading.Thread | None = None

    def make(self) -> None:
        with self.lock:
            if self.said.exists():
                return
            shutil.rmtree(self.root, ignore_errors=True)  # what an interrupted session left
            copy_project(self.root)
            proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", "--configfile",
                                   TINY_CONFIG], cwd=self.root, env=user_env(), capture_output=True,
                                  text=True)
            said = {"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}
            partial = self.said.with_suffix(".partial")
            partial.write_text(json.dumps(said))
            partial.replace(self.said)  # whole, or not there

    def start(self) -> None:
        """Begin the run beside this worker's tests (unless another worker has made it)."""
        self.thread = threading.Thread(target=self.make, name="tiny workflow run")
        self.thread.start()

    def result(self) -> TinyRun:
        if self.thread is not None:
            self.thread.join()
        self.make()  # made by another worker, or made now
        said = json.loads(self.said.read_text())
        proc = subprocess.CompletedProcess(["snakemake", "--configfile", TINY_CONFIG], **said)
        if proc.returncode:
            pytest.fail(f"the shared tiny workflow run failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
        return TinyRun(self.root, proc)


_SHARED: list[_Shared] = []  # this session's, once its first test has started


def _needs_tiny_run(item: pytest.Item) -> bool:
    return "tiny_run" in getattr(item, "fixturenames", ()) or (
        getattr(getattr(item, "module", None), "snakemake_until", None) is snakemake_until)


@pytest.fixture(scope="session", autouse=True)
def _shared_tiny_run(request, tmp_path_factory):
    """The session's shared run, started at once if a test this session runs needs it."""
    base = tmp_path_factory.getbasetemp()
    shared = _Shared(base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base)
    _SHARED.append(shared)
    if any(_needs_tiny_run(item) for item in request.session.items):
        shared.start()
    yield
    if shared.thread is not None:
        shared.thread.join()  # another worker may be waiting for it
    _SHARED.clear()


@pytest.fixture(scope="session")
def tiny_run() -> TinyRun:
    """The whole workflow, run once on the tiny config in a copy of the project. Read it only:
    other tests, on other workers too, read the same files (`copy_of_tiny_run` to change one)."""
    return _SHARED[0].result()


def one_at_a_time(root: Path):
    """Held while Snakemake runs in `root`: the shared run's lock if `root` is its folder, where
    tests on other workers start Snakemake too; nothing for any other folder."""
    shared = _SHARED[0]
    return shared.running if root == shared.root else contextlib.nullcontext()


def copy_of_tiny_run(tiny: TinyRun, root: Path) -> Path:
    """A copy of the shared run's project in `root`, its results and Snakemake's records with
    their times as they are, so that Snakemake finds it as up to date as the original."""
    shutil.copytree(tiny.root, root, symlinks=True)
    return root


def snakemake_until(tmp_path: Path, rule: str) -> tuple[Path, subprocess.CompletedProcess]:
    """The tiny config's run that ran `rule` and the console it printed: the shared run, read only
    (`tmp_path` is the caller's own folder, unused)."""
    tiny = _SHARED[0].result()
    assert f"rule {rule}:" in tiny.proc.stderr, f"the shared tiny run ran no job of rule {rule}"
    return tiny.root, tiny.proc
