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


def _keys(schema: dict, prefix=()) -> set:
    keys = set()
    for name, sub in schema.get("properties", {}).items():
        keys.add(prefix + (name,))
        keys |= _keys(sub, prefix + (name,))
    return keys


def _config_keys(cfg: dict, prefix=()) -> set:
    keys = set()
    for name, value in cfg.items():
        keys.add(prefix + (name,))
        if isinstance(value, dict):
            keys |= _config_keys(value, prefix + (name,))
    return keys


def test_config_yaml_sets_every_key_the_schema_knows_and_the_schema_holds_no_defaults():
    # each default is written once: in config/config.yaml, which every run loads first
    schema = yaml.safe_load(Path(SCHEMA).read_text())
    assert _keys(schema) == _config_keys(CONFIG)
    assert "default:" not in Path(SCHEMA).read_text()


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
