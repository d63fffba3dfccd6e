"""Test set-up: the device the kernel tests run on, a copy of the committed reference run for the
comparison's tests, a copy of the project for workflow tests, one tiny workflow run that the
tests which only read a finished run share, and what a test run makes beside its tests.

Without CUDA the kernel runs under Triton's CPU interpreter, switched on here (`minimodel.entry`)
before any test module imports the kernel. The development tools in tools/ are importable by name
(`import tune`), through pytest's `pythonpath` setting in pyproject.toml.

What takes minutes and only waits or runs a subprocess is a background resource (`background`):
the shared tiny run (`tiny_run`, `snakemake_until`), kernel_report's compiles, the runs through
SLURM. Each is made once per test run, under pytest-xdist too: in a folder every worker sees,
under a file lock, by the first worker whose tests need it, in a thread started as its first test
starts, so it goes on beside the tests collected before those that read it (docs/testing.md). A
test that changes a finished run changes a copy of it (`copy_of_tiny_run`), never the shared one;
one that starts Snakemake in the shared run's folder holds `one_at_a_time(root)` while it runs.

Under pytest-xdist (`make test`: `pytest -n auto`) every test is a unit of its own that any worker
may take, but for the modules of `ONE_WORKER`, whose tests share what a module-scoped fixture
made; those go first.
"""

import contextlib
import gc
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import traceback
import zlib
from pathlib import Path
from typing import NamedTuple

import pytest
import torch
from filelock import FileLock

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)

HAS_CUDA = torch.cuda.is_available()

# One thread per process: under pytest-xdist each worker has a core to itself, and a torch that
# starts an OpenMP thread per core in every worker has them spin on each other's cores
# (docs/testing.md, "One thread per process"; commit c4c6d37 gives the CPU time it saves).
# The processes the tests start (Snakemake and its jobs, contenders' children, kernel_report)
# inherit it; a rule that sets its own threads (cpu_roofline) still does. A value the user set is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

DEVICE = "cuda" if HAS_CUDA else "cpu"
# What compiles kernels for sm_80-sm_90 through Triton's ptxas takes minutes of CPU: its tests
# (marked `compiles`) form a test run of their own, `make test-compile`, which CI runs after `make test`.
COMPILES = os.environ.get("MINIMODEL_COMPILE") == "1"
COMPILES_SKIP = "compiles kernels for sm_80-sm_90 (minutes): MINIMODEL_COMPILE=1, or make test-compile"
requires_gpu = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")


@pytest.fixture
def gen():
    """A generator with a fresh seed each test, printed so that a failure can be replayed."""
    seed = torch.seed() % 2**63
    print(f"random seed {seed}")
    return torch.Generator().manual_seed(seed)


@pytest.fixture
def fixed_gen(request):
    """A generator seeded from the test's name: the same inputs every run. For the kernel's
    gradients against float64: on rare inputs they miss the rule's 2x margin (D = rowsum(dO ∘ O)
    from the fp16 O, as FlashAttention's backward takes it; notes/backward.md), so a fresh seed
    would fail a run now and then."""
    seed = zlib.crc32(request.node.nodeid.encode())
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


# Modules whose tests run on one xdist worker under `pytest -n auto` (`--dist load`), and why.
# (`--dist loadgroup` would say this with marks, but pytest-xdist 3.8 under pytest 9.2 drops the
# groups and spreads the tests: pytest-xdist#1386.) `make test` takes `--dist worksteal`, which
# hands each worker a contiguous run of the tests in their order and steals from a run's end, so a
# module's tests stay together there too but for a steal at its edge (docs/testing.md,
# "Scheduling").
ONE_WORKER = {
    "tests/test_plots_script.py": "the committed reference's figures, drawn once for two tests",
}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """xdist's load scheduling by scopes: a module of `ONE_WORKER` is one scope, any other test is
    one of its own. Scopes of more tests are sent first, the others in the order collected."""
    if config.getoption("dist") != "load":
        return None
    # not at the top: pytest-xdist is needed only with -n (the dev extra installs it)
    from xdist.scheduler import LoadScopeScheduling

    class OneWorkerModules(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in ONE_WORKER else nodeid

    return OneWorkerModules(config, log)


class Background:
    """A test run's resource made once, beside the tests rather than before them: `make(folder)`
    builds it in a folder every xdist worker sees and returns what it found (JSON). The first
    worker whose tests need it starts it in a thread as its first test starts, under a file lock,
    so the other workers find it made or wait for it; the tests that read it are collected last
    (`pytest_collection_modifyitems`), by when it is made. `make` returning {"skip": reason}
    skips the tests that read it; an exception fails them, with its traceback."""

    def __init__(self, name: str, make, also_wanted_by=lambda item: False):
        self.name, self.make, self.also_wanted_by = name, make, also_wanted_by
        self.thread: threading.Thread | None = None
        self.home: Path | None = None  # the test run's shared folder, once it started

    def wanted_by(self, item: pytest.Item) -> bool:
        if item.get_closest_marker("skip"):
            return False  # a test skipped outright reads nothing (`compiles` without MINIMODEL_COMPILE)
        return self.name in getattr(item, "fixturenames", ()) or self.also_wanted_by(item)

    @property
    def folder(self) -> Path:
        return self.home / self.name

    def _build(self) -> None:
        made = self.home / f"{self.name}.json"
        with FileLock(self.home / f"{self.name}.lock"):
            if made.exists():
                return
            shutil.rmtree(self.folder, ignore_errors=True)  # what an interrupted test run left
            self.folder.mkdir(parents=True)
            try:
                found = self.make(self.folder)
            except Exception:
                found = {"error": traceback.format_exc()}
            partial = made.with_suffix(".partial")
            partial.write_text(json.dumps(found))
            partial.replace(made)  # whole, or not there

    def start(self) -> None:
        self.thread = threading.Thread(target=self._build, name=self.name)
        self.thread.start()

    def result(self) -> dict:
        """What `make` found: waits for the thread of this worker, or for another worker's."""
        if self.thread is not None:
            self.thread.join()
        self._build()  # made by another worker, or made now
        found = json.loads((self.home / f"{self.name}.json").read_text())
        if "error" in found:
            pytest.fail(f"{self.name} failed to be made:\n{found['error']}")
        if "skip" in found:
            pytest.skip(found["skip"])
        return found


BACKGROUND: dict[str, Background] = {}


def background(name: str, make, also_wanted_by=lambda item: False):
    """Register `make` as the test run's background resource `name`; returns the session fixture
    of that name (assign it in the test module), which gives (its folder, what `make` found)."""
    BACKGROUND[name] = Background(name, make, also_wanted_by)

    @pytest.fixture(scope="session", name=name)
    def fixture() -> tuple[Path, dict]:
        resource = BACKGROUND[name]
        return resource.folder, resource.result()

    return fixture


def pytest_collection_finish(session):
    """What the test run imported (torch, pandas, matplotlib, every test module: 376,000 objects)
    left out of the garbage collector's full collections from now on, its own and those of the
    code under test (`timers.release_memory`): over them a full collection took 0.24 s, and
    test_timing.py's test of the rounds, which collected after every sample then, took 72 s in
    `make test` (commit 3c366fd). What the tests create is still collected."""
    gc.collect()
    gc.freeze()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    """The tests that compile kernels through ptxas (`compiles`) skip unless MINIMODEL_COMPILE=1
    (`make test-compile`). The tests that read a background resource last, each in the order collected: by
    the time a worker reaches them, what they read has been made beside the tests before them."""
    if not COMPILES:
        for item in items:
            if item.get_closest_marker("compiles"):
                item.add_marker(pytest.mark.skip(reason=COMPILES_SKIP))
    items.sort(key=lambda item: any(b.wanted_by(item) for b in BACKGROUND.values()))


@pytest.fixture(scope="session", autouse=True)
def _background(request, tmp_path_factory):
    """Every background resource a test of this run reads, started at once; at the run's
    end, waited for (another worker may be reading it)."""
    base = tmp_path_factory.getbasetemp()
    home = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    for resource in BACKGROUND.values():
        resource.home = home
        if any(resource.wanted_by(item) for item in request.session.items):
            resource.start()
    yield
    for resource in BACKGROUND.values():
        if resource.thread is not None:
            resource.thread.join()
        resource.thread = None


class TinyRun(NamedTuple):
    """The shared run: its copy of the project, and the console of `snakemake` there."""
    root: Path
    proc: subprocess.CompletedProcess


def _make_tiny_run(folder: Path) -> dict:
    copy_project(folder)
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", "--configfile", TINY_CONFIG],
                          cwd=folder, env=user_env(), capture_output=True, text=True)
    return {"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}


def _uses_snakemake_until(item: pytest.Item) -> bool:
    """A test whose own code calls `snakemake_until`."""
    code = getattr(getattr(item, "function", None), "__code__", None)
    return code is not None and "snakemake_until" in code.co_names


BACKGROUND["tiny_run"] = Background("tiny_run", _make_tiny_run, _uses_snakemake_until)


def _the_tiny_run() -> TinyRun:
    resource = BACKGROUND["tiny_run"]
    proc = subprocess.CompletedProcess(["snakemake", "--configfile", TINY_CONFIG], **resource.result())
    if proc.returncode:
        pytest.fail(f"the shared tiny workflow run failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return TinyRun(resource.folder, proc)


@pytest.fixture(scope="session")
def tiny_run() -> TinyRun:
    """The whole workflow, run once on the tiny config in a copy of the project. Read it only:
    other tests, on other workers too, read the same files (`copy_of_tiny_run` to change one)."""
    return _the_tiny_run()


def one_at_a_time(root: Path):
    """Held while Snakemake runs in `root`: a lock if `root` is the shared run's folder, where
    tests on other workers start Snakemake too; nothing for any other folder."""
    shared = BACKGROUND["tiny_run"]
    if root != shared.folder:
        return contextlib.nullcontext()
    return FileLock(shared.home / "tiny_run.snakemake.lock")


def snakemake(workdir, *args, check=True, cwd=None, env=None, **popen):
    """Snakemake as a user starts it: no PYTHONPATH, so the installed minimodel is another tree's
    (`env`: variables set beside the user's; `popen`: more of subprocess.run's arguments)."""
    with one_at_a_time(workdir):
        proc = subprocess.run(
            [sys.executable, "-m", "snakemake", "--cores", "2", "--configfile",
             str(workdir / "config" / "tiny.yaml"), *args], cwd=cwd or workdir,
            env={**user_env(), **(env or {})}, capture_output=True, text=True, **popen)
    if check and proc.returncode:
        pytest.fail(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


def copy_of_tiny_run(tiny: TinyRun, root: Path) -> Path:
    """A copy of the shared run's project in `root`, its results and Snakemake's records with
    their times as they are, so that Snakemake finds it as up to date as the original."""
    shutil.copytree(tiny.root, root, symlinks=True)
    return root


def snakemake_until(tmp_path: Path, rule: str) -> tuple[Path, subprocess.CompletedProcess]:
    """The tiny config's run that ran `rule` and the console it printed: the shared run, read only
    (`tmp_path` is the caller's own folder, unused)."""
    tiny = _the_tiny_run()
    # "localrule symbolic:", or with its wildcards: "localrule cpu_bytes_part (dtype=float32):"
    assert re.search(rf"rule {rule}( \([^)]*\))?:", tiny.proc.stderr), \
        f"the shared tiny run ran no job of rule {rule}"
    return tiny.root, tiny.proc
