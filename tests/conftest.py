"""Test set-up: the device the kernel tests run on, a copy of the committed reference run for the
comparison's tests, and a copy of the project for workflow tests.

Without CUDA the kernel runs under Triton's CPU interpreter, switched on here (`minimodel.entry`)
before any test module imports the kernel. The development tools in tools/ are importable by name
(`import tune`), through pytest's `pythonpath` setting in pyproject.toml.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

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
    shutil.copy(ROOT / "tests" / "data" / "tiny_config.yaml", root / "config" / "tiny.yaml")
    for name, text in extra_configs:
        (root / "config" / name).write_text(text)
    return root


def snakemake_until(tmp_path: Path, rule: str) -> tuple[Path, subprocess.CompletedProcess]:
    """Snakemake on the tiny config in a copy of the project, up to `rule`: (the copy, its run)."""
    root = copy_project(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET")}
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", "--configfile", "config/tiny.yaml",
         "--until", rule], cwd=root, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return root, proc
