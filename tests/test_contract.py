"""minimodel.contract: each fact once, and runs made before the "lab" names read in them."""

import json
import re
from pathlib import Path

import pandas as pd

from minimodel import contract

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "minimodel"
REFERENCE = Path(__file__).resolve().parents[1] / "results" / "reference" / "nvidia-h200"
OLD = "se" + "ed"  # the old word, spelled so that this file is not one of its hits


def sources():
    return {path: path.read_text() for path in SRC.rglob("*.py")}


def test_each_grid_name_is_a_literal_in_one_module():
    tools = [p for folder in ("scripts", "tools") for p in (ROOT / folder).glob("*.py")]
    files = {**sources(), **{p: p.read_text() for p in tools}}
    for name in contract.GRIDS:
        quoted = re.compile(rf"""["'`]{name}["'`]""")
        holders = [path.name for path, text in files.items() if quoted.search(text)]
        assert holders == ["contract.py"], (name, holders)


def test_one_module_knows_the_project_root():
    holders = [path for path, text in sources().items() for _ in re.finditer(r"parents\[", text)]
    assert [p.relative_to(SRC).as_posix() for p in holders] == ["provenance/project.py"]


def test_no_module_names_the_lab_with_the_old_word():
    for path, text in sources().items():
        for bad in (f"{OLD}_grid", f"{OLD}_literal", f'"{OLD}"'):
            assert bad not in text, (path, bad)


def test_no_module_is_over_400_lines():
    assert {p.name: len(t.splitlines()) for p, t in sources().items() if len(t.splitlines()) > 400} == {}


def test_old_tables_are_read_in_todays_names_and_random_seed_is_kept():
    old = pd.DataFrame({"grid": [OLD, contract.FLASHATTENTION_GRID], "convention": [OLD, "consistent"],
                        "group": [f"{OLD} grid", "awkward N"], f"{OLD}_literal_pass": [True, False],
                        "random_seed": [0, 0]})
    new = contract.upgrade_table(old)
    assert list(new.columns) == ["grid", "convention", "group", "lab_literal_pass", "random_seed"]
    assert list(new["grid"]) == [contract.LAB_GRID, contract.FLASHATTENTION_GRID]
    assert list(new["convention"]) == [contract.LAB_CONVENTION, contract.CONSISTENT_CONVENTION]
    assert list(new["group"]) == [contract.LAB_CASES, contract.AWKWARD_CASES]
    assert contract.upgrade_table(new).equals(new)  # today's tables are unchanged
    summary = {"random_seed": 1, f"{OLD}_grid_predictions_from_gpu_ceilings": [],
               "cases_detail": [{"group": f"{OLD} grid", f"{OLD}_literal_pass": True}]}
    assert contract.upgrade_summary(summary) == {
        "random_seed": 1, "lab_grid_predictions_from_gpu_ceilings": [],
        "cases_detail": [{"group": contract.LAB_CASES, "lab_literal_pass": True}]}


def test_the_committed_reference_reads_in_the_contracts_names():
    timing = contract.upgrade_table(pd.read_csv(REFERENCE / contract.TIMING))
    assert set(timing["grid"]) == set(contract.GRIDS)
    made = json.loads((REFERENCE / contract.manifest("gpu_timing")).read_text())
    contenders = set(made["params"].get("contenders") or {})  # the reference's config names them
    assert set(timing["impl"]) == set(contract.IMPLEMENTATIONS) | contenders
    symbolic = contract.upgrade_table(pd.read_csv(REFERENCE / contract.SYMBOLIC_BYTES))
    assert set(symbolic["convention"]) == set(contract.CONVENTIONS)
    gpu_bytes = contract.upgrade_table(pd.read_csv(REFERENCE / contract.GPU_BYTES))
    assert {"model_lab_bytes", "model_consistent_bytes"} <= set(gpu_bytes.columns)
    assert set(gpu_bytes["status"]) == {contract.MEASURED}
