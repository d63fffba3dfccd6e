"""Comparing the backward's rows: keyed on `direction`, judged with the forward's bands; a table
without the column is all forward; a pass one run lacks is not comparable, with the reason."""

import json
import shutil

import pandas as pd
import pytest
from test_compare import REFERENCE, edit_csv, vouch

from minimodel import contract, symbolic, symbolic_backward
from minimodel.provenance import io
from minimodel.report import compare


@pytest.fixture
def run(tmp_path):
    """A copy of the committed H200 run (made before the backward), to be edited."""
    folder = tmp_path / "run"
    shutil.copytree(REFERENCE, folder)
    return folder


def with_backward(frame: pd.DataFrame, **backward) -> pd.DataFrame:
    """The table's rows marked forward, and a copy of them as the backward's rows (`backward` set)."""
    frame = frame.assign(direction=contract.FORWARD)
    return pd.concat([frame, frame.assign(direction=contract.BACKWARD, **backward)], ignore_index=True)


def add_backward(folder, name, **backward):
    path = folder / name
    path.write_text(with_backward(pd.read_csv(path), **backward).to_csv(index=False))
    vouch(path)


def test_a_pass_one_run_lacks_is_not_comparable_and_the_forward_is_judged_as_before(run):
    """A table without `direction` is all forward: the reference (made before the backward)
    against a run whose tables have the column and backward rows."""
    _, before = compare.compare_runs(run, REFERENCE)
    for name in (contract.SYMBOLIC_BYTES, contract.CPU_BYTES, contract.CORRECTNESS, contract.TIMING,
                 contract.GPU_BYTES):  # the column added as text: every other byte as it was
        lines = (run / name).read_text().splitlines(keepends=True)
        body = "".join(f"{contract.FORWARD},{line}" for line in lines[1:])
        (run / name).write_text("direction," + lines[0] + body)
        vouch(run / name)
    table, verdict = compare.compare_runs(run, REFERENCE)
    assert verdict["verdict"] == "agree" and verdict["parts"] == before["parts"]
    assert not table["item"].str.contains("forward").any()  # the forward's items as before
    for name in (contract.CPU_BYTES, contract.CORRECTNESS, contract.TIMING, contract.GPU_BYTES):
        add_backward(run, name, **({"dq_accumulation": contract.DQ_SEPARATE_PASS}
                                   if name == contract.CPU_BYTES else {}))
    _, verdict = compare.compare_runs(run, REFERENCE)
    assert verdict["verdict"] == "agree"
    said = ("backward rows only in the run: the reference has none (a run made before the backward, "
            "or one that did not run them)")
    for part in ("cpu bytes", "correctness", "timing", "gpu bytes"):
        counts, then = verdict["parts"][part], before["parts"][part]
        assert counts.get("agree") == then.get("agree"), part
        assert counts["not comparable"] == then.get("not comparable", 0) + 1, part
        assert said in verdict["not_comparable"][part], part
    _, verdict = compare.compare_runs(REFERENCE, run)
    reasons = verdict["not_comparable"]["timing"]
    assert any(r.startswith("backward rows only in the reference") for r in reasons)


def test_the_backward_rows_are_judged_per_pass(run, tmp_path):
    """Backward rows in both runs: a count that moved, a ratio out of its band, a verdict that
    differs, DRAM bytes out of their tolerance are each a disagreement of the backward's row."""
    for name in (contract.CPU_BYTES, contract.TIMING, contract.CORRECTNESS, contract.GPU_BYTES):
        add_backward(run, name, **({"dq_accumulation": contract.DQ_SEPARATE_PASS}
                                   if name == contract.CPU_BYTES else {}))
    other = tmp_path / "other"
    shutil.copytree(run, other)
    assert compare.compare_runs(run, other)[1]["verdict"] == "agree"
    backward = contract.BACKWARD

    def first_backward(column, change):
        def edit(f):
            i = f.index[f["direction"] == backward][0]
            f.loc[i, column] = change(f.loc[i, column])
        return edit

    edit_csv(other / contract.CPU_BYTES, first_backward("bytes_instrumented", lambda x: x + 2))
    edit_csv(other / contract.CORRECTNESS, first_backward("passed", lambda x: not x))

    def slower_backward_kernel(f):
        rows = ((f["direction"] == backward) & (f["impl"] == "triton") & (f["grid"] == "flashattention")
                & (f["N"] == 4096) & (f["d"] == 64))
        f.loc[rows, "ms"] *= 1.08

    edit_csv(other / contract.TIMING, slower_backward_kernel)

    def more_backward_dram(f):
        i = f.index[(f["direction"] == backward) & (f["status"] == contract.MEASURED)][0]
        f.loc[i, "dram_read_bytes"] *= 1.10

    edit_csv(other / contract.GPU_BYTES, more_backward_dram)
    table, verdict = compare.compare_runs(run, other)
    bad = table[table["verdict"] == "disagree"]
    assert verdict["verdict"] == "disagree"
    assert set(bad["part"]) == {"cpu bytes", "correctness", "timing", "gpu bytes"}
    assert bad["item"].str.startswith("backward: ").all()
    timing = bad[bad["part"] == "timing"]
    assert set(timing["metric"]) >= {"kernel/fa2 (backward)", "kernel/cudnn (backward)"}
    assert (timing["tolerance"] == compare.timing_band("flashattention", 4096)).all()
    assert len(bad[bad["part"] == "gpu bytes"]) == 1 and len(bad[bad["part"] == "cpu bytes"]) == 1


def test_a_fresh_symbolic_table_agrees_with_the_reference_and_says_what_it_adds(run):
    """Today's symbolic table (forward, backward, forward + backward rows) made with the reference's
    parameters: its forward rows agree exactly, its other passes are said not comparable, and a
    backward row that moved is a disagreement of that pass."""
    cfg = json.loads((REFERENCE / contract.manifest("symbolic")).read_text())["params"]["cfg"]
    grid = cfg["n"], cfg["head_dims"], cfg["tiles"], cfg["dtypes"]
    table = pd.concat([symbolic.byte_table(*grid, schemes=symbolic.SCHEMES),
                       symbolic_backward.byte_table(*grid)], ignore_index=True)
    io.write_csv(run / contract.SYMBOLIC_BYTES, table)
    io.write_csv(run / contract.SYMBOLIC_BACKWARD_FORMULAS, symbolic_backward.formulas_table())
    owner = run / contract.manifest("symbolic")
    m = json.loads(owner.read_text())  # the rule today also writes the backward's closed forms
    m["outputs"].append({**m["outputs"][0], "path": m["outputs"][0]["path"].replace(
        "bytes.csv", "backward_formulas.csv")})
    owner.write_text(json.dumps(m))
    for name in (contract.SYMBOLIC_BYTES, contract.SYMBOLIC_BACKWARD_FORMULAS):
        vouch(run / name)
    rows, verdict = compare.compare_runs(run, REFERENCE)
    part = rows[rows["part"] == "symbolic"]
    assert verdict["verdict"] == "agree" and "disagree" not in set(part["verdict"])
    assert (part["verdict"] == "agree").sum() == len(contract.forward_rows(table)) + 2  # + 2 texts
    reasons = verdict["not_comparable"]["symbolic"]
    assert {r.split(":")[0] for r in reasons} == {  # the backward's closed forms: missing in the reference
        "backward rows only in the run", "fwd+bwd rows only in the run", "missing in one run"}
    other = run.parent / "other"
    shutil.copytree(run, other)
    moved = pd.read_csv(other / contract.SYMBOLIC_BYTES, float_precision="round_trip")  # all else as it was
    moved.loc[moved.index[moved["dq_accumulation"] == contract.DQ_SEPARATE_PASS][0], "bytes"] = 1.0
    io.write_csv(other / contract.SYMBOLIC_BYTES, moved)
    vouch(other / contract.SYMBOLIC_BYTES)
    rows, verdict = compare.compare_runs(run, other)
    bad = rows[rows["verdict"] == "disagree"]
    assert len(bad) == 1 and bad.iloc[0]["item"].startswith("backward: scheme=flash")
    assert "dq_accumulation=separate pass" in bad.iloc[0]["item"]
