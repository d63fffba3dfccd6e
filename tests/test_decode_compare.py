"""compare's decode part: the model's and the CPU's decode rows identical, each GPU row's status equal,
GB/s within its tolerance on one GPU model; a run without decode's tables is said so."""

import json
import shutil
from pathlib import Path

import pandas as pd
from conftest import REFERENCE

from minimodel.floor import contract
from minimodel.floor.provenance import io, manifest
from minimodel.report import compare
from minimodel.report.compare import cli, decode


def vouch(path: Path) -> None:
    """The manifest that owns `path` vouches for its bytes now, as its rule would have."""
    owner = next(d / "manifest.json" for d in path.parents if (d / "manifest.json").is_file())
    m = json.loads(owner.read_text())
    for entry in m["outputs"]:
        if owner.parent / Path(entry["path"]).name == path:
            entry.update(sha256=io.sha256_file(path), size=path.stat().st_size)
    m[manifest.SELF_HASH] = manifest.content_hash(m)
    owner.write_text(json.dumps(m, indent=2))


def edit(folder: Path, name: str, change) -> None:
    path = folder / name
    if path.suffix == ".json":
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))
    else:
        frame = pd.read_csv(path)
        frame = change(frame)
        frame.to_csv(path, index=False)
    vouch(path)


def part_rows(table: pd.DataFrame, part: str = decode.NAME) -> pd.DataFrame:
    return table[table["part"] == part]


def test_decode_rows_agree_with_themselves_and_a_moved_count_disagrees(tiny_run, tmp_path):
    run, ref = (shutil.copytree(tiny_run.root / "results", tmp_path / side) for side in ("run", "ref"))
    table, verdict = compare.compare_runs(run, ref)
    rows = part_rows(table)
    assert len(rows) and (rows["verdict"] == "agree").all()
    assert rows["item"].str.startswith("model: ").any() and rows["item"].str.startswith("cpu: ").any()
    assert rows["item"].str.startswith("gpu: ").any()
    # the tiny run has no GPU: its timing rows are not comparable, with the reason
    timing = part_rows(table, decode.TIMING)
    assert list(timing["verdict"]) == ["not comparable"] and "no GPU timing" in timing["reason"].iloc[0]

    def moved(frame):
        frame.loc[0, "bytes_instrumented"] += 1
        return frame

    edit(run, contract.DECODE_CPU, moved)
    table, verdict = compare.compare_runs(run, ref)
    assert verdict["verdict"] == "disagree"
    assert (part_rows(table)["verdict"] == "disagree").sum() == 1


def test_gb_per_s_is_judged_on_one_gpu_model_within_its_tolerance(tiny_run, tmp_path):
    run, ref = (shutil.copytree(tiny_run.root / "results", tmp_path / side) for side in ("run", "ref"))

    def timed(gbs):
        def change(frame):
            cuda = frame["backend"] == "cuda"
            frame.loc[cuda, "status"] = contract.OK
            frame.loc[cuda, "gb_per_s"] = gbs
            return frame
        return change

    for folder, gbs in ((run, 1000.0), (ref, 1050.0)):
        edit(folder, contract.DECODE_GPU, timed(gbs))
        edit(folder, contract.DECODE_GPU_SUMMARY, lambda data: data.update(device="NVIDIA H200"))
    table, verdict = compare.compare_runs(run, ref)
    timing = part_rows(table, decode.TIMING)
    assert len(timing) == (pd.read_csv(run / contract.DECODE_GPU)["backend"] == "cuda").sum()
    assert (timing["verdict"] == "agree").all()  # 5 % apart, inside 10 %
    edit(run, contract.DECODE_GPU, timed(800.0))
    table, _ = compare.compare_runs(run, ref)
    assert (part_rows(table, decode.TIMING)["verdict"] == "disagree").all()


def test_a_run_made_before_decode_is_not_comparable_and_named(tiny_run):
    table, verdict = compare.compare_runs(tiny_run.root / "results", REFERENCE)
    rows = part_rows(table)
    assert len(rows) == 3 and (rows["verdict"] == "not comparable").all()
    assert rows["reason"].str.contains("missing in the reference").all()
    assert verdict["verdict"] == "agree"


def test_the_help_and_docs_name_the_decode_part_and_its_tolerance():
    """compare's --help (its module's docstring) and docs/reproducing.md's table state decode's rule
    with the tolerance the code applies."""
    tolerance = f"{decode.GBS_TOLERANCE:.0%}".replace("%", " %")
    help_text = " ".join(cli.__doc__.split())
    assert "- decode (" in help_text and f"GB/s within {tolerance}" in help_text
    docs = (Path(__file__).resolve().parents[1] / "docs" / "reproducing.md").read_text()
    row = next(line for line in docs.splitlines() if line.startswith("| decode |"))
    assert f"GB/s within {tolerance}" in row
