"""Comparing a run with a reference: what must be identical, what must stay in its band."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from minimodel.report import compare

REFERENCE = Path(__file__).resolve().parents[1] / "results" / "reference" / "nvidia-h200"


@pytest.fixture
def run(tmp_path):
    """A copy of the committed H200 run, to be edited as another run would differ."""
    folder = tmp_path / "run"
    shutil.copytree(REFERENCE, folder)
    return folder


def edit_csv(path: Path, edit) -> None:
    frame = pd.read_csv(path)
    edit(frame)
    frame.to_csv(path, index=False)


def test_a_run_agrees_with_itself(run, tmp_path):
    table, verdict = compare.compare_runs(run, REFERENCE)
    assert verdict["verdict"] == "agree" and not verdict["disagreements"]
    assert set(table["part"]) >= {"symbolic", "cpu bytes", "cpu profiler", "correctness", "timing"}
    assert compare.main([str(run), str(REFERENCE), "--out", str(tmp_path / "out")]) == 0
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"comparison.csv", "verdict.json",
                                                             "comparison.png"}


def test_one_instrumented_byte_count_that_moved_is_a_disagreement(run, tmp_path):
    edit_csv(run / "cpu/bytes.csv", lambda f: f.loc.__setitem__((0, "bytes_instrumented"),
                                                               f.loc[0, "bytes_instrumented"] + 2))
    table, verdict = compare.compare_runs(run, REFERENCE)
    bad = table[table["verdict"] == "disagree"]
    assert len(bad) == 1 and bad.iloc[0]["part"] == "cpu bytes"
    assert compare.main([str(run), str(REFERENCE), "--out", str(tmp_path / "out")]) == 1


def test_profiler_bytes_within_their_tolerance_agree(run):
    edit_csv(run / "cpu/bytes.csv", lambda f: f.__setitem__("bytes_profiler", f["bytes_profiler"] * 1.03))
    assert compare.compare_runs(run, REFERENCE)[1]["verdict"] == "agree"
    edit_csv(run / "cpu/bytes.csv", lambda f: f.__setitem__("bytes_profiler", f["bytes_profiler"] * 1.05))
    table, verdict = compare.compare_runs(run, REFERENCE)
    assert verdict["verdict"] == "disagree"
    assert set(table.loc[table["verdict"] == "disagree", "part"]) == {"cpu profiler"}


def test_a_timing_ratio_is_judged_by_its_grids_band(run):
    def slower_kernel(factor, grid):
        def edit(f):
            rows = (f["impl"] == "triton") & (f["grid"] == grid) & (f["N"] == 4096) & (f["d"] == 64)
            f.loc[rows, "ms"] *= factor
        return edit

    edit_csv(run / "gpu/timing/timing.csv", slower_kernel(1.04, "flashattention"))
    assert compare.compare_runs(run, REFERENCE)[1]["verdict"] == "agree"  # inside the 5 % band
    edit_csv(run / "gpu/timing/timing.csv", slower_kernel(1.04, "flashattention"))  # 8 % in all
    table, _ = compare.compare_runs(run, REFERENCE)
    bad = table[table["verdict"] == "disagree"]
    assert set(bad["part"]) == {"timing"} and set(bad["metric"]) == set(compare.RATIOS)
    assert (bad["tolerance"] == compare.timing_band("flashattention", 4096)).all()


def test_another_gpu_or_none_is_not_comparable_and_not_a_failure(run):
    summary = json.loads((run / "gpu/timing/timing.json").read_text())
    summary["device"] = "NVIDIA A100-SXM4-80GB"
    (run / "gpu/timing/timing.json").write_text(json.dumps(summary))
    table, verdict = compare.compare_runs(run, REFERENCE)
    assert verdict["verdict"] == "agree"
    assert verdict["not_comparable"]["timing"] == ["different GPU models: speed ratios do not travel "
                                                   "between them"]
    summary["device"] = None
    (run / "gpu/timing/timing.json").write_text(json.dumps(summary))
    edit_csv(run / "gpu/correctness/correctness.csv", lambda f: f.__setitem__("backend", "interpreter"))
    _, verdict = compare.compare_runs(run, REFERENCE)
    assert verdict["verdict"] == "agree"
    assert verdict["not_comparable"]["timing"] == ["the run had no GPU timing"]
    assert "interpreter" in verdict["not_comparable"]["correctness"][0]


def test_a_correctness_verdict_that_differs_is_a_disagreement(run):
    edit_csv(run / "gpu/correctness/correctness.csv", lambda f: f.loc.__setitem__((0, "passed"), False))
    table, verdict = compare.compare_runs(run, REFERENCE)
    assert verdict["verdict"] == "disagree"
    assert table.loc[table["verdict"] == "disagree", "part"].tolist() == ["correctness"]


def test_inputs_that_differ_are_listed(run):
    m = json.loads((run / "symbolic/manifest.json").read_text())
    m["environment"]["torch"] = "9.9.9"
    next(e for e in m["inputs"] if e["path"] == "src/minimodel/symbolic.py")["sha256"] = "0" * 64
    (run / "symbolic/manifest.json").write_text(json.dumps(m))
    _, verdict = compare.compare_runs(run, REFERENCE)
    assert verdict["verdict"] == "agree"  # why numbers could move, never a failure by itself
    assert "symbolic: src/minimodel/symbolic.py (changed)" in verdict["inputs_that_differ"]
    assert "symbolic: environment: torch: 9.9.9 (reference: 2.11.0)" in verdict["inputs_that_differ"]


def test_the_cli_never_writes_into_a_committed_reference(monkeypatch, capsys):
    monkeypatch.chdir(REFERENCE.parents[2])
    assert compare.main([str(REFERENCE.relative_to(REFERENCE.parents[2]))]) == 2
    assert "read, never written" in capsys.readouterr().err
