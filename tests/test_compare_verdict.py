"""What a comparison says: a console summary of a few lines, and whether a verdict fails the run
(rule compare_verdict, compare.fail_on_disagree)."""

import json

from conftest import REFERENCE
from test_compare import edit_csv, vouch

from minimodel.report import compare
from minimodel.report.compare import verdict as verdicts


def disagreeing(run, rows: int):
    """The copy with `rows` instrumented byte counts moved: that many disagreements."""
    def edit(f):
        f.loc[f.index[:rows], "bytes_instrumented"] += 2
    edit_csv(run / "cpu/bytes.csv", edit)
    return compare.compare_runs(run, REFERENCE)


def test_the_console_gets_a_few_lines_and_says_where_the_rest_is(run):
    m = json.loads((run / "symbolic/manifest.json").read_text())
    m["environment"]["torch"] = "9.9.9"  # an input that differs: expected, said so
    (run / "symbolic/manifest.json").write_text(json.dumps(m))
    vouch(run / "symbolic/manifest.json")
    table, verdict = disagreeing(run, 20)
    assert (table["verdict"] == compare.DISAGREE).sum() == 20
    lines = compare.summary_text(verdict).splitlines()
    assert lines[0].endswith(": disagree") and len(lines) < 30 < len(table)
    assert sum(line.startswith("  DISAGREE ") for line in lines) == verdicts.SHOWN
    assert f"  and {20 - verdicts.SHOWN} more disagreements: every row is in comparison.csv" in lines
    families = [i for i, line in enumerate(lines) if line.startswith("  timing families")]
    assert families == [1]  # read first
    said = next(line for line in lines if line.startswith("  inputs: "))
    assert "expected between runs and never a failure" in said
    assert max(map(len, lines[1:])) < 250


def test_a_disagreement_fails_the_run_only_when_the_config_asks(run, tmp_path):
    _, verdict = disagreeing(run, 1)
    path = tmp_path / "verdict.json"
    path.write_text(json.dumps(verdict))
    passed, said = compare.gate(path, fail=True)
    assert not passed and said.startswith(f"compare: disagree ({verdict['run']} against ")
    assert "1 disagreement: all of bytes_model" in said
    assert "compare.fail_on_disagree: false in the config keeps its exit status 0" in said
    passed, said = compare.gate(path, fail=False)
    assert passed and said.endswith("compare.fail_on_disagree is false, so the run does not fail on it")
    path.write_text(json.dumps({**verdict, "verdict": compare.AGREE}))
    assert compare.gate(path, fail=True)[0]
    path.write_text(json.dumps({**verdict, "verdict": compare.NOTHING, "parts": {}}))
    passed, said = compare.gate(path, fail=True)
    assert not passed and "no number could be compared" in said


def test_a_disagreement_keeps_every_file(run, tmp_path):
    disagreeing(run, 1)
    assert compare.main([str(run), str(REFERENCE), "--out", str(tmp_path / "out")]) == 1
    written = json.loads((tmp_path / "out/verdict.json").read_text())
    assert written["verdict"] == compare.DISAGREE
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"comparison.csv", "verdict.json",
                                                             "comparison.png"}


def test_the_failing_line_names_at_most_three_and_says_how_many(tmp_path):
    """gate's line on a verdict.json of five disagreements: the count, the first three by name."""
    rows = [{"part": "timing", "item": f"point {i}", "metric": "kernel/fa4", "reason": ""}
            for i in range(5)]
    path = tmp_path / "verdict.json"
    path.write_text(json.dumps({"run": "a", "reference": "b", "verdict": compare.DISAGREE,
                                "parts": {"timing": {compare.DISAGREE: 5, compare.AGREE: 9}},
                                "disagreements": rows}))
    passed, said = compare.gate(path, fail=True)
    assert not passed
    named = "; ".join(f"kernel/fa4, point {i}" for i in range(3))
    assert f"5 disagreements, the first three: {named}." in said


def test_a_disagreement_of_other_code_says_so_and_names_the_reference_commit(run, tmp_path):
    # a user who reruns a later commit against the reference sees why numbers may move: the code
    _, verdict = disagreeing(run, 1)
    assert verdict["code_that_differs"] == [] and verdicts.code_note(verdict) is None
    made = verdict["commits"]["reference"]
    assert len(made) == 1 and len(made[0]) == 40 and verdict["commits"]["run"] == made  # a copy
    m = json.loads((run / "symbolic/manifest.json").read_text())
    next(e for e in m["inputs"] if e["path"] == "src/minimodel/symbolic.py")["sha256"] = "0" * 64
    (run / "symbolic/manifest.json").write_text(json.dumps(m))
    vouch(run / "symbolic/manifest.json")
    _, verdict = disagreeing(run, 1)
    assert verdict["code_that_differs"] == ["src/minimodel/symbolic.py"]
    note = verdicts.code_note(verdict)
    assert note.startswith("the run's code differs from the reference's in 1 file "
                           "(src/minimodel/symbolic.py)")
    assert f"made by commit {made[0][:7]}" in note
    assert f"  {note}" in compare.summary_text(verdict).splitlines()
    path = tmp_path / "verdict.json"
    path.write_text(json.dumps(verdict))
    passed, said = compare.gate(path, fail=True)
    assert not passed and note in said
    # agreement needs no explanation, whatever code made it
    assert verdicts.code_note({**verdict, "verdict": compare.AGREE}) is None
