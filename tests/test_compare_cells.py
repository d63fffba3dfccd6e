"""Cells a comparison cannot take as they stand (empty, spelled otherwise, a status that changed):
each is named, never read as a number or as a pass. Run under pandas 2 and 3 both (`make
test-pandas3`): pandas 3 keeps an empty cell NaN through astype(str), and groupby drops NaN keys."""

import json

import numpy as np
import pandas as pd
import pytest
from conftest import REFERENCE

from minimodel.floor import contract
from minimodel.report import compare, runs
from minimodel.report.compare import correctness, cpu_bytes, gpu_bytes, ratios, samples, timing
from minimodel.report.compare.rows import AGREE, DISAGREE, NOT_COMPARABLE


def reference(name: str) -> pd.DataFrame:
    return pd.read_csv(REFERENCE / name)


def test_samples_rows_without_a_name_are_unknown_and_each_row_keeps_its_own_samples():
    """Two timed rows and sample rows whose `impl` is empty between them: those are counted as
    unknown keys, and each row's samples are its own (cut by the groups' sizes with the empty rows
    dropped from the groups but not from the frame, every later row took its neighbour's)."""
    point = {"direction": contract.BACKWARD, "grid": contract.FLASHATTENTION_GRID, "B": 4, "H": 32,
             "N": 4096, "d": 64, "causal": False}
    rng = np.random.default_rng(3)
    own = {"a_impl": 1.0 + rng.random(10), "c_impl": 5.0 + rng.random(10)}
    rows = [{**point, "impl": impl, "sample": i, "ms": ms} for impl, values in own.items()
            for i, ms in enumerate(values)]
    rows += [{**point, "impl": None, "sample": i, "ms": 100.0} for i in range(3)]
    rows += [{**point, "impl": "", "sample": 0, "ms": 100.0}]
    frame = pd.DataFrame(rows).sample(frac=1, random_state=1)  # in no order
    keys = {impl: ratios.keyed(pd.DataFrame([{**point, "impl": impl}]))[ratios.KEY].iloc[0] for impl in own}
    expected = {tuple(keys[impl]): (10, float(np.median(values))) for impl, values in own.items()}
    held = samples.check(frame, expected, "samples.csv")
    assert not held.damaged
    for impl, values in own.items():
        np.testing.assert_array_equal(held.by_key[tuple(keys[impl])], values)
    assert "4 sample rows of no timed row (unknown keys)" in held.line


def point_rows(impl_status: dict[str, str]) -> pd.DataFrame:
    """One point's timing rows of the reference, each implementation's status as given."""
    table = reference(contract.TIMING)
    first = table[(table["impl"] == contract.TRITON) & (table["status"] == contract.OK)].iloc[0]
    same = (table[list(ratios.POINT)] == first[list(ratios.POINT)]).all(axis=1)
    rows = table[same & table["impl"].isin(impl_status)].copy()
    rows["status"] = rows["impl"].map(impl_status)
    return rows


def test_an_empty_status_is_named_not_judged():
    """An empty status cell (NaN: pandas 2 once read it "nan", pandas 3 failed on it) is `no
    status`: the ratio it is part of is not comparable, and says which run."""
    ref = point_rows({contract.TRITON: contract.OK, contract.NAIVE: contract.OK})
    run = ref.copy()
    run.loc[run["impl"] == contract.NAIVE, "status"] = np.nan
    none = samples.Samples(held=False)
    rows = pd.DataFrame(timing.judge(run, ref, none, none))
    naive = rows[rows["metric"].str.startswith("kernel/naive")]
    assert naive["verdict"].tolist() == [NOT_COMPARABLE]
    assert naive["reason"].iloc[0] == f"{contract.TIMING} of the run: {ratios.NO_STATUS}"


def test_a_point_spelled_twice_is_refused():
    """causal written "1" beside "True" in a CSV (read as words) is one point twice: refused, as an
    exact duplicate is, not paired twice with the reference's."""
    ref = point_rows({contract.TRITON: contract.OK, contract.NAIVE: contract.OK})
    again = ref[ref["impl"] == contract.NAIVE].assign(causal=str(int(ref["causal"].iloc[0])))
    twice = pd.concat([ref.assign(causal=ref["causal"].astype(str)), again])
    none = samples.Samples(held=False)
    with pytest.raises(runs.RunError, match="rows share their key"):
        timing.judge(twice, ref, none, none)


@pytest.mark.parametrize("status, verdict", [
    ("failed: ncu gave no value", DISAGREE),  # measured in the reference: a change of status
    (contract.MEASURED, AGREE),
])
def test_a_gpu_bytes_point_that_was_not_measured_is_a_changed_status(status, verdict):
    ref = contract.with_direction(reference(contract.GPU_BYTES))
    ref = ref[ref["direction"] == contract.FORWARD]
    run = ref.copy()
    run.loc[run.index[0], "status"] = status
    point = ["regime", "B", "H", "N", "d", "causal", "impl"]
    rows = pd.DataFrame(gpu_bytes.judge(run, ref, contract.FORWARD, point))
    assert len(rows[rows["verdict"] == DISAGREE]) == (verdict == DISAGREE)
    if verdict == DISAGREE:
        [bad] = rows[rows["verdict"] == DISAGREE].to_dict("records")
        assert bad["metric"] == "status"
        assert bad["reason"] == f"status differs: {status} (run) against {contract.MEASURED} (reference)"
    both = run.copy()
    both.loc[both.index[0], "status"] = "failed: the same reason"
    rows = pd.DataFrame(gpu_bytes.judge(both, both, contract.FORWARD, point))
    assert (rows["verdict"] == AGREE).all()


def test_profiler_bytes_held_by_one_run_only_are_named_not_dropped():
    """A row the profiler measured in one run only (its cpu.profiler_max_n larger) is a row of its
    own, not comparable, where it was left out without a word."""
    ref = contract.with_direction(reference(contract.CPU_BYTES))
    ref = ref[ref["direction"] == contract.FORWARD]
    measured = ref["bytes_profiler"].notna()
    assert measured.any() and (~measured).any()  # the tiled schemes: never measured, in no run
    run = ref.copy()
    run.loc[measured[measured].index[0], "bytes_profiler"] = np.nan
    rows = pd.DataFrame(cpu_bytes.judge(run, ref, contract.FORWARD))
    profiler = rows[rows["part"] == cpu_bytes.PROFILER]
    assert len(profiler) == measured.sum()
    assert profiler["verdict"].value_counts().to_dict() == {AGREE: measured.sum() - 1, NOT_COMPARABLE: 1}
    assert (profiler.loc[profiler["verdict"] == NOT_COMPARABLE, "reason"].iloc[0]
            == "measured in the reference only (its cpu.profiler_max_n is larger)")


@pytest.mark.parametrize("column", ["passed", "skipped"])
def test_a_case_without_a_verdict_is_not_a_pass(column):
    ref = contract.with_direction(reference(contract.CORRECTNESS))
    ref = ref[ref["direction"] == contract.FORWARD]
    for key, default in correctness.DEFAULTS.items():
        if key not in ref:
            ref[key] = default(ref)
    run = ref.copy()
    ran = ref.index[~ref["skipped"].astype(bool)][0]
    run[column] = run[column].astype(object)
    run.loc[ran, column] = np.nan
    rows = pd.DataFrame(correctness.judge(run, ref, contract.FORWARD, correctness.KEYS))
    [bad] = rows[rows["verdict"] == DISAGREE].to_dict("records")
    assert bad["reason"] == f"no {column} value (true or false) in the run"
    assert correctness.verdict("true") is True and correctness.verdict(0) is False
    assert correctness.verdict(np.nan) is None and correctness.verdict("") is None


def test_the_cli_never_replaces_the_comparison_a_rule_wrote(run, tmp_path, capsys):
    """RUN/compare holds the workflow's own comparison once the workflow ran: a comparison without
    --out goes beside it (RUN/compare-<reference>), one with --out into it is refused, and it is
    never replaced (its manifest would no longer vouch for it)."""
    made = run / "compare"
    made.mkdir()
    (made / "verdict.json").write_text(json.dumps({"verdict": AGREE}))
    (made / "manifest.json").write_text("{}")
    assert compare.main([str(run), str(REFERENCE)]) == 0
    assert f"written to {run / ('compare-' + REFERENCE.name)}:" in capsys.readouterr().out
    assert compare.main([str(run), str(REFERENCE), "--out", str(made)]) == 2
    assert "holds a workflow rule's outputs" in capsys.readouterr().err
    assert {p.name for p in made.iterdir()} == {"verdict.json", "manifest.json"}
    assert json.loads((made / "verdict.json").read_text()) == {"verdict": AGREE}
    assert compare.main([str(run), str(REFERENCE), "--out", str(tmp_path / "elsewhere")]) == 0
