"""The config schema: defaults, and bad configs stopped with a message that names the key."""

import copy
from pathlib import Path

import pytest
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = str(ROOT / "workflow" / "schemas" / "config.schema.yaml")
CONFIG = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


def test_default_config_is_valid():
    validate(copy.deepcopy(CONFIG), SCHEMA)


def test_every_config_key_has_a_comment():
    lines = (ROOT / "config" / "config.yaml").read_text().splitlines()
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped and not stripped.startswith("#") and ":" in stripped:
            is_section = stripped.endswith(":")
            assert is_section or lines[i - 1].strip().startswith("#"), f"no comment above: {line}"


def test_empty_config_gets_the_defaults():
    cfg = {}
    validate(cfg, SCHEMA, set_default=True)
    assert cfg["cpu"]["sram_bytes"] == 65536
    assert cfg["gpu"]["correctness"]["interpreter"]["max_n"] == 1024


@pytest.mark.parametrize(
    "path, value, named",
    [
        (("cpu", "sram_byte"), 1, "sram_byte"),  # misspelled key
        (("cpu", "n"), [256, -4], "-4"),  # negative N
        (("symbolic", "dtypes"), ["float8"], "float8"),  # unknown dtype
        (("gpu", "correctness", "head_dim"), 48, "48"),  # unsupported head dim
        (("roofline", "repeats"), 0, "repeats"),
        (("roofline", "matmul_n"), 10_000_000, "matmul_n"),  # past the schema's bound
        (("cpu", "n"), [4_194_304], "4194304"),
        (("overwrite_reference",), "yes", "overwrite_reference"),
    ],
)
def test_bad_config_is_rejected_naming_the_key(path, value, named):
    cfg = copy.deepcopy(CONFIG)
    node = cfg
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(WorkflowError) as err:
        validate(cfg, SCHEMA)
    message = str(err.value)
    print(message)
    assert named in message
    assert path[0] in message
