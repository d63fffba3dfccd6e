"""minimodel.floor.contract: each fact once, and the committed reference named as the contract names it."""

import json
import re
from pathlib import Path

import pandas as pd

from minimodel.floor import contract

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
    assert [p.relative_to(SRC).as_posix() for p in holders] == ["floor/provenance/project.py"]


def test_no_module_names_the_lab_with_the_old_word():
    for path, text in sources().items():
        text = text.replace(f'{{"{OLD}": "input_{OLD}"}}', "")  # runs.RENAMED_COLUMNS: gpu_bytes' input seed
        for bad in (f"{OLD}_grid", f"{OLD}_literal", f'"{OLD}"'):
            assert bad not in text, (path, bad)


def test_no_module_is_over_400_lines():
    assert {p.name: len(t.splitlines()) for p, t in sources().items() if len(t.splitlines()) > 400} == {}


def test_the_committed_reference_reads_in_the_contracts_names():
    timing = pd.read_csv(REFERENCE / contract.TIMING)
    assert set(timing["grid"]) == set(contract.GRIDS)
    made = json.loads((REFERENCE / contract.manifest("gpu_timing")).read_text())
    contenders = set(made["params"].get("contenders") or {})  # the reference's config names them
    assert set(timing["impl"]) == set(contract.IMPLEMENTATIONS) | contenders
    symbolic = pd.read_csv(REFERENCE / contract.SYMBOLIC_BYTES)
    assert set(symbolic["convention"]) == set(contract.CONVENTIONS)
    correctness = pd.read_csv(REFERENCE / contract.CORRECTNESS)
    assert set(correctness["group"]) == {contract.LAB_CASES, contract.AWKWARD_CASES, contract.HEAD_DIM_CASES,
                                         contract.GQA_CASES}
    # the grouped-query group is the cases whose K and V have fewer heads than Q, and only those
    assert (correctness["group"] == contract.GQA_CASES).equals(correctness["H_kv"] < correctness["H"])
    assert correctness["impl"].notna().all()  # every case names its implementation
    gpu_bytes = pd.read_csv(REFERENCE / contract.GPU_BYTES)
    assert {"model_lab_bytes", "model_consistent_bytes"} <= set(gpu_bytes.columns)
    assert set(gpu_bytes["status"]) == {contract.MEASURED}


def _old_word_lines(folder: Path) -> list[tuple[str, int]]:
    """(file, line) wherever a table, summary or text of a run says the old word on its own."""
    word = re.compile(rf"(?<![A-Za-z_]){OLD}(?![A-Za-z])")  # not random_seed nor input_seed
    hits = []
    for path in sorted(folder.rglob("*")):
        if path.suffix in (".csv", ".json", ".txt") and path.name != contract.MANIFEST \
                and contract.LOGS not in path.relative_to(folder).parts:
            lines = path.read_text().splitlines()
            hits += [(path.relative_to(folder).as_posix(), i) for i, line in enumerate(lines)
                     if word.search(line)]
    return hits


def test_the_committed_reference_says_the_old_word_nowhere(tmp_path):
    """No table, summary or text of the committed reference says the old word; an older run's one
    older name, gpu/bytes/bytes.csv's `seed` column (today's input_seed), is read in today's name
    by report.runs.RENAMED_COLUMNS."""
    from minimodel.report import runs

    assert _old_word_lines(REFERENCE) == []
    committed = pd.read_csv(REFERENCE / contract.GPU_BYTES)
    older = tmp_path / contract.GPU_BYTES
    older.parent.mkdir(parents=True)
    committed.rename(columns={"input_seed": OLD}).to_csv(older, index=False)
    assert _old_word_lines(tmp_path) == [(contract.GPU_BYTES, 0)]  # the header only
    read = runs.table(tmp_path, contract.GPU_BYTES, ["input_seed"])
    assert OLD not in read.columns and read["input_seed"].equals(committed["input_seed"])


def test_no_module_of_the_package_is_over_350_lines():
    """Room to grow: a module that passes the limit is split where its parts are other things,
    never squeezed under it (ARCHITECTURE.md)."""
    long = {path.relative_to(SRC).as_posix(): len(text.splitlines()) for path, text in sources().items()
            if len(text.splitlines()) > 350}
    assert long == {}
