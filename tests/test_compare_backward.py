"""Comparing the backward's rows: keyed on `direction`, judged with the forward's bands; a table
without the column is all forward; a pass one run lacks is not comparable, with the reason."""

import json
import shutil
from pathlib import Path

import pandas as pd
from conftest import REFERENCE
from test_compare import edit_csv, vouch, without_samples

from minimodel import symbolic
from minimodel.floor import contract
from minimodel.floor.provenance import io
from minimodel.report import compare
from minimodel.report.compare.symbolic import READS as SYMBOLIC_READS

TABLES = (contract.SYMBOLIC_BYTES, contract.CPU_BYTES, contract.CORRECTNESS, contract.TIMING,
          contract.GPU_BYTES)
PARTS = dict(zip(("symbolic", "cpu bytes", "correctness", "timing", "gpu bytes"), TABLES, strict=True))
DATA = Path(__file__).resolve().parent / "data"




def forward_only(folder: Path) -> Path:
    """`folder`'s tables as a run without the backward writes them: the forward's rows alone, without
    `direction` and the backward's own columns (those every forward row leaves empty), and without
    timing samples (which came after the backward)."""
    without_samples(folder)
    for name in TABLES:
        frame = pd.read_csv(folder / name, float_precision="round_trip")
        forward = contract.forward_rows(frame)
        backward_only = [c for c in frame.columns if forward[c].isna().all()]
        forward.drop(columns=["direction", *backward_only]).to_csv(folder / name, index=False)
        vouch(folder / name)
    return folder


def test_a_pass_one_run_lacks_is_not_comparable_and_the_forward_is_judged_as_before(tmp_path):
    """A table without `direction` is all forward: a reference whose tables have neither the column
    nor backward rows against a run whose tables have the column, then against the committed run."""
    older = forward_only(shutil.copytree(REFERENCE, tmp_path / "older"))
    plain = shutil.copytree(older, tmp_path / "plain")
    _, before = compare.compare_runs(plain, older)
    for name in TABLES:  # the column added as text: every other byte as it was
        lines = (plain / name).read_text().splitlines(keepends=True)
        body = "".join(f"{contract.FORWARD},{line}" for line in lines[1:])
        (plain / name).write_text("direction," + lines[0] + body)
        vouch(plain / name)
    table, verdict = compare.compare_runs(plain, older)
    assert verdict["verdict"] == "agree" and verdict["parts"] == before["parts"]
    points = table[table["part"] != "timing families"]  # a family names its pass, forward too
    assert not points["item"].str.contains("forward").any()  # the forward's items as before
    # the committed run: these forward rows, and the other passes' rows the reference lacks
    _, verdict = compare.compare_runs(REFERENCE, older)
    assert verdict["verdict"] == "agree"
    for part, name in PARTS.items():
        passes = set(pd.read_csv(REFERENCE / name)["direction"]) - {contract.FORWARD}
        counts, then = verdict["parts"][part], before["parts"][part]
        assert passes and counts.get("agree") == then.get("agree"), part
        assert counts["not comparable"] == then.get("not comparable", 0) + len(passes), part
        for direction in passes:
            said = (f"{direction} rows only in the run: the reference has none (a run made before the "
                    f"backward, or one that did not run them)")
            assert said in verdict["not_comparable"][part], (part, direction)
    _, verdict = compare.compare_runs(older, REFERENCE)
    reasons = verdict["not_comparable"]["timing"]
    assert any(r.startswith("backward rows only in the reference") for r in reasons)


def test_the_backward_rows_are_judged_per_pass(run, tmp_path):
    """Backward rows in both runs: a count that moved, a ratio out of its band, a verdict that
    differs, DRAM bytes out of their tolerance are each a disagreement of the backward's row."""
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
        # beyond the backward's band without samples, max(band, 10 %), by 5 points
        f.loc[rows, "ms"] *= 1.05 + max(compare.timing_band("flashattention", 4096, backward), 0.10)

    for folder in (run, other):  # judged by the band alone (the samples' test is test_compare_timing's)
        without_samples(folder)
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
    assert (timing["tolerance"] == max(compare.timing_band("flashattention", 4096, backward), 0.10)).all()
    assert len(bad[bad["part"] == "gpu bytes"]) == 1 and len(bad[bad["part"] == "cpu bytes"]) == 1


def test_a_fresh_symbolic_table_agrees_with_the_reference_and_says_what_it_adds(run, tmp_path):
    """Today's symbolic table (forward, backward, forward + backward rows) made with the reference's
    parameters: every row agrees exactly with the committed reference's; against the one made before
    the backward (tests/data/pre_backward_symbolic_bytes.csv, the H200 reference run of commit
    b11c757) its forward rows agree exactly and its other passes are said not comparable; a backward
    row that moved is a disagreement of that pass."""
    cfg = json.loads((REFERENCE / contract.manifest("symbolic")).read_text())["params"]["cfg"]
    grid = cfg["n"], cfg["head_dims"], cfg["tiles"], cfg["dtypes"]
    table = symbolic.tidy_table(*grid)
    io.write_csv(run / contract.SYMBOLIC_BYTES, table)
    io.write_csv(run / contract.SYMBOLIC_BACKWARD_FORMULAS, symbolic.backward_formulas_table())
    for name in (contract.SYMBOLIC_BYTES, contract.SYMBOLIC_BACKWARD_FORMULAS):
        vouch(run / name)
    texts = len(SYMBOLIC_READS) - 1  # every closed form, the backward's too, and lab 01's table
    rows, verdict = compare.compare_runs(run, REFERENCE)
    part = rows[rows["part"] == "symbolic"]
    assert verdict["verdict"] == "agree" and set(part["verdict"]) == {"agree"}
    assert len(part) == len(table) + texts
    older = shutil.copytree(REFERENCE, tmp_path / "older")  # its symbolic stage before the backward
    shutil.copy(DATA / "pre_backward_symbolic_bytes.csv", older / contract.SYMBOLIC_BYTES)
    (older / contract.SYMBOLIC_BACKWARD_FORMULAS).unlink()
    owner = older / contract.manifest("symbolic")
    m = json.loads(owner.read_text())
    m["outputs"] = [o for o in m["outputs"] if not o["path"].endswith(contract.SYMBOLIC_BACKWARD_FORMULAS)]
    owner.write_text(json.dumps(m))
    vouch(older / contract.SYMBOLIC_BYTES)
    rows, verdict = compare.compare_runs(run, older)
    part = rows[rows["part"] == "symbolic"]
    assert verdict["verdict"] == "agree" and "disagree" not in set(part["verdict"])
    assert (part["verdict"] == "agree").sum() == len(contract.forward_rows(table)) + texts - 1
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
