"""The dependencies are pyproject.toml's: environment.yml installs the project with them, and the
rules' conda environment (workflow/envs/minimodel.yaml) holds a copy that must stay equal."""

import re
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def normalize(req: str) -> str:
    return req.replace(" ", "").replace('"', "'").lower()


def test_environment_yml_installs_the_project_and_lists_no_dependency_of_its_own():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert sorted(re.split(r"[=<>]", c)[0] for c in conda) == ["pip", "python"]
    # the package itself, so scripts can import minimodel, with the extras `make install` takes
    (requirement,) = pip_section
    match = re.fullmatch(r"-e \.\[([\w,-]+)\]", requirement)
    assert match and set(match.group(1).split(",")) == {"dev", "slurm"} <= set(extras)


def test_the_rules_conda_environment_lists_the_runtime_dependencies_and_not_the_package():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    env = yaml.safe_load((ROOT / "workflow" / "envs" / "minimodel.yaml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    # no `-e .`: Snakemake copies the file into .snakemake/conda/, where "." is not the project
    assert sorted(map(normalize, deps)) == sorted(map(normalize, pip_section))


def test_triton_and_numpy_are_pinned_for_the_gpu_machines_and_the_interpreter():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(d.startswith("triton==3.6.0") for d in deps)
    assert any(d.startswith("numpy") and "<2.3" in d for d in deps)


def test_the_installed_slurm_plugin_left_numpy_below_2_3():
    # `make install` installs the slurm extra: its resolution must keep the interpreter's numpy
    from importlib.metadata import PackageNotFoundError, version

    try:
        version("snakemake-executor-plugin-slurm")
    except PackageNotFoundError:
        pytest.skip("the slurm extra is not installed")
    major, minor = map(int, version("numpy").split(".")[:2])
    assert (major, minor) < (2, 3)
