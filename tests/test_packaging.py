"""environment.yml and pyproject.toml must list the same dependencies."""

import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def normalize(req: str) -> str:
    return req.replace(" ", "").replace('"', "'").lower()


def test_environment_yml_and_pyproject_agree():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = project["dependencies"] + project["optional-dependencies"]["dev"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    conda_reqs = [r for r in pip_section if not r.startswith("-e")]
    assert sorted(map(normalize, declared)) == sorted(map(normalize, conda_reqs))
    assert "-e ." in pip_section  # the package itself, so scripts can import minimodel


def test_triton_and_numpy_are_pinned_for_the_gpu_machines_and_the_interpreter():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(d.startswith("triton==3.6.0") for d in deps)
    assert any(d.startswith("numpy") and "<2.3" in d for d in deps)
