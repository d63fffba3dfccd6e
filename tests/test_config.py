"""The config schema: defaults, and bad configs stopped with a message that names the key."""

import copy
from pathlib import Path

import pytest
import torch
import yaml

from minimodel.floor.provenance.configcheck import ConfigError, check_config, check_yaml_syntax, main

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = str(ROOT / "workflow" / "schemas" / "config.schema.yaml")
CONFIG = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


def test_default_config_is_valid():
    check_config(copy.deepcopy(CONFIG), SCHEMA)


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


def _set(path, value):
    cfg = copy.deepcopy(CONFIG)
    node = cfg
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return cfg


@pytest.mark.parametrize(
    "path, value, says",
    [
        (("cpu", "sram_byte"), 1,
         "unknown key 'cpu.sram_byte' (did you mean 'cpu.sram_bytes'?); the keys of cpu are n, "),
        (("resuts_dir",), "x", "unknown key 'resuts_dir' (did you mean 'results_dir'?)"),
        (("cpu", "n"), [256, -4], "cpu.n[1] is -4; accepted: an integer from 1 to 1048576"),
        (("symbolic", "dtypes"), ["float8"],
         "symbolic.dtypes[0] is 'float8'; accepted: one of float16, bfloat16, float32"),
        (("gpu", "correctness", "head_dim"), 48,
         "gpu.correctness.head_dim is 48; accepted: one of 16, 32, 64, 128, 256"),
        (("roofline", "repeats"), 0, "roofline.repeats is 0; accepted: an integer from 1 to"),
        (("roofline", "matmul_n"), 10_000_000,
         "roofline.matmul_n is 10000000; accepted: an integer from 1 to 65536"),
        (("cpu", "n"), [4_194_304], "cpu.n[0] is 4194304"),
        (("overwrite_reference",), "yes", "overwrite_reference is 'yes'; accepted: true or false"),
        # JSON Schema counts 64.0 as an integer; torch.randn does not
        (("gpu", "correctness", "n"), [64.0], "gpu.correctness.n[0] is 64.0; accepted: an integer"),
        (("cpu", "block_r"), 64.0, "cpu.block_r is 64.0; accepted: an integer"),
        (("cpu", "threads"), True, "cpu.threads is True; accepted: an integer >= 0"),
        (("random_seed",), 2**64, f"random_seed is {2**64}; accepted: an integer from 0 to {2**63 - 1}"),
        (("random_seed",), -1, "random_seed is -1; accepted: an integer from 0 to"),
        (("symbolic", "tiles"), [[64]],
         "symbolic.tiles[0] is [64]; accepted: a list of 2 items, each an integer from 1 to 1048576"),
        (("gpu", "timing", "warmup_ms"), 0, "gpu.timing.warmup_ms is 0; accepted: a number > 0"),
        (("compare", "reference"), "", "compare.reference is ''; accepted: a non-empty string or null"),
        (("gpu", "correctness", "backward"), "yes",
         "gpu.correctness.backward is 'yes'; accepted: true or false"),
        (("gpu", "correctness", "interpreter", "backward_max_n"), 0,
         "gpu.correctness.interpreter.backward_max_n is 0; accepted: an integer from 1 to"),
        (("gpu", "timing", "backward"), 1, "gpu.timing.backward is 1; accepted: true or false"),
        (("contenders",), {"mine": {"fn": "m:f", "backward": "yes"}},
         "contenders.mine.backward is 'yes'; accepted: true or false"),
    ],
)
def test_bad_config_is_refused_in_one_line_naming_key_value_and_what_is_accepted(path, value, says):
    with pytest.raises(ConfigError) as err:
        check_config(_set(path, value), SCHEMA)
    assert str(err.value).startswith(f"config: {says}")
    assert "\n" not in str(err.value)


def test_every_key_of_a_contender_entry_is_in_the_schema():
    from minimodel.contenders.spec import KEYS

    entry = {"fn": "m:f", "devices": ["cuda"], "dtypes": ["float16"], "head_dims": [64], "causal": [True],
             "gqa": True, "triton": False, "timeout_s": 30, "grids": ["lab"], "layout": "bnhd",
             "backward": True}
    assert set(entry) == KEYS
    check_config(_set(("contenders",), {"mine": entry}), SCHEMA)


def test_each_problem_gets_its_own_line():
    cfg = _set(("cpu", "sram_byte"), 1)
    cfg["random_seed"] = -1
    with pytest.raises(ConfigError) as err:
        check_config(cfg, SCHEMA)
    assert [line.split(" ")[1:3] for line in str(err.value).splitlines()] == [
        ["unknown", "key"], ["random_seed", "is"]]


def test_the_largest_seed_is_valid_for_every_use():
    # torch takes seeds up to 2**64 - 1; the timing and GPU-bytes stages add a point's index
    # (far below 2**63) to the seed, so 2**63 - 1 plus any index stays valid
    largest = yaml.safe_load(Path(SCHEMA).read_text())["properties"]["random_seed"]["maximum"]
    check_config(_set(("random_seed",), largest), SCHEMA)
    check_config(_set(("random_seed",), 0), SCHEMA)
    assert torch.Generator().manual_seed(largest + 2**63).initial_seed() == 2**64 - 1
    torch.manual_seed(largest)
    with pytest.raises(ConfigError, match="random_seed"):
        check_config(_set(("random_seed",), largest + 1), SCHEMA)
    with pytest.raises(ValueError, match="Overflow"):  # the limit the schema keeps clear of
        torch.Generator().manual_seed(2**64)


@pytest.mark.parametrize("text, line, column, says", [
    ("results_dir: results\ncpu:\n  n: [1, 2\n  threads: 1\n", 4, 10, "expected ',' or ']'"),
    ("cpu:\n  n: [1]\n threads: 1\n", 3, 2, ""),
    ("cpu:\n\tn: [1]\n", 2, 1, "found character '\\t'"),
])
def test_a_yaml_syntax_error_names_the_file_and_the_line(tmp_path, text, line, column, says):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        check_yaml_syntax(path)
    assert str(err.value).startswith(f"{path}, line {line}, column {column}: not valid YAML: {says}")


def test_json_and_valid_yaml_pass_the_syntax_check(tmp_path):
    (tmp_path / "a.json").write_text('{"cpu": {"n": [256]}}')
    check_yaml_syntax(tmp_path / "a.json")
    check_yaml_syntax(ROOT / "config" / "config.yaml")


def test_a_config_file_can_be_checked_before_a_run(tmp_path, capsys):
    good, bad, broken = tmp_path / "good.yaml", tmp_path / "bad.yaml", tmp_path / "broken.yaml"
    good.write_text("cpu:\n  n: [256]\n")
    bad.write_text("cpu:\n  n: [256.0]\n")
    broken.write_text("cpu: [\n")
    assert main([str(good)]) == 0
    assert main([str(bad)]) == 1
    assert capsys.readouterr().err == "config: cpu.n[0] is 256.0; accepted: an integer from 1 to 1048576\n"
    assert main([str(broken)]) == 1
    assert capsys.readouterr().err.startswith(f"{broken}, line 2, column 1: not valid YAML")


def test_load_config_is_the_workflows_config_with_configfiles_over_it(tmp_path):
    from minimodel.floor.provenance.configcheck import ConfigError, load_config

    default = load_config()
    assert default["gpu"]["timing"]["lab_n"] == [64, 256, 1024, 4096]
    mine = tmp_path / "mine.yaml"
    mine.write_text("gpu:\n  timing:\n    lab_n: [128]\n")
    assert load_config(mine)["gpu"]["timing"] == {**default["gpu"]["timing"], "lab_n": [128]}
    mine.write_text("gpu:\n  timing:\n    seed_n: [128]\n")
    with pytest.raises(ConfigError, match="unknown key 'gpu.timing.seed_n'"):
        load_config(mine)
