"""Comparing a run with a reference: what must be identical, what must stay in its band."""

import json
import shutil
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from conftest import REFERENCE

from minimodel.floor import contract
from minimodel.floor.provenance import io, manifest
from minimodel.report import compare, runs
from minimodel.report.compare.figure import against_band
from minimodel.report.compare.rows import label_direction


def vouch(path: Path) -> None:
    """Make the manifest that owns `path` vouch for its bytes now, as a rule that wrote them would:
    another run differs from the reference with manifests of its own, not by tampering."""
    owner = path if path.name == "manifest.json" else next(
        d / "manifest.json" for d in path.parents if (d / "manifest.json").is_file())
    m = json.loads(owner.read_text())
    for entry in m["outputs"]:
        if owner.parent / Path(entry["path"]).name == path:
            entry.update(sha256=io.sha256_file(path), size=path.stat().st_size)
    m[manifest.SELF_HASH] = manifest.content_hash(m)
    owner.write_text(json.dumps(m, indent=2))


def edit_csv(path: Path, edit, vouched: bool = True) -> None:
    frame = pd.read_csv(path)
    edit(frame)
    frame.to_csv(path, index=False)
    if vouched:
        vouch(path)


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


def without_samples(folder: Path) -> None:
    """`folder` as a run made before the samples: no `samples` column, no samples.csv, and a stage
    manifest that lists none."""
    edit_csv(folder / contract.TIMING, lambda f: f.drop(columns="samples", inplace=True))
    samples = folder / contract.TIMING_SAMPLES
    owner = samples.parent / "manifest.json"
    m = json.loads(owner.read_text())
    m["outputs"] = [e for e in m["outputs"] if Path(e["path"]).name != samples.name]
    m[manifest.SELF_HASH] = manifest.content_hash(m)
    owner.write_text(json.dumps(m, indent=2))
    samples.unlink()


def test_a_timing_ratio_is_judged_by_its_grids_band(run):
    """A run without samples is judged by max(band, 10 %): FlashAttention's grid's forward band is
    14.0 %."""
    without_samples(run)

    def slower_kernel(factor, grid):
        def edit(f):
            rows = ((f["impl"] == "triton") & (f["grid"] == grid) & (f["N"] == 4096) & (f["d"] == 64)
                    & (f["direction"] == contract.FORWARD))
            f.loc[rows, "ms"] *= factor
        return edit

    band = compare.timing_band("flashattention", 4096)
    assert band == 0.14
    edit_csv(run / "gpu/timing/timing.csv", slower_kernel(1.12, "flashattention"))
    assert compare.compare_runs(run, REFERENCE)[1]["verdict"] == "agree"  # inside the band
    edit_csv(run / "gpu/timing/timing.csv", slower_kernel(1.04, "flashattention"))  # 16.5 % in all
    table, _ = compare.compare_runs(run, REFERENCE)
    bad = table[table["verdict"] == "disagree"]
    timed = set(pd.read_csv(run / "gpu/timing/timing.csv")["impl"])  # the reference's contenders too
    contenders = {f"kernel/{name}" for name in timed - set(contract.IMPLEMENTATIONS)}
    assert set(bad["part"]) == {"timing"} and set(bad["metric"]) == set(compare.RATIOS) | contenders
    assert (bad["tolerance"] == band).all() and (bad["reason"] == "beyond its band").all()
    assert (bad["rule"] == "wider band: no samples in the run").all()


def test_a_contender_timed_in_both_runs_is_compared_by_its_ratio(run, tmp_path):
    timing = run / "gpu/timing/timing.csv"
    frame = pd.read_csv(timing)
    frame = pd.concat([frame, frame[frame["impl"] == "sdpa_cudnn"].assign(impl="mine")])  # as fast as cuDNN
    frame.to_csv(timing, index=False)
    vouch(timing)
    other = tmp_path / "other"
    shutil.copytree(run, other)
    table, verdict = compare.compare_runs(run, other)
    per_pass = {"kernel/mine"} | {f"kernel/mine ({d})" for d in (contract.BACKWARD, contract.FWD_BWD)}
    assert verdict["verdict"] == "agree" and per_pass <= set(table["metric"])

    def slower_mine(f):  # its forward only: each pass's ratio is judged on its own
        rows = ((f["impl"] == "mine") & (f["grid"] == "flashattention") & (f["N"] == 4096) & (f["d"] == 64)
                & (f["direction"] == contract.FORWARD))
        f.loc[rows, "ms"] *= 1.20  # beyond FlashAttention's grid's 15 %

    edit_csv(other / "gpu/timing/timing.csv", slower_mine)
    table, _ = compare.compare_runs(run, other)
    bad = table[table["verdict"] == "disagree"]
    assert set(bad["metric"]) == {"kernel/mine"} and len(bad) == 2  # causal and not


def test_a_contender_timed_in_one_run_only_is_said_not_compared(run, tmp_path):
    timing = run / "gpu/timing/timing.csv"
    frame = pd.read_csv(timing)
    pd.concat([frame, frame[frame["impl"] == "sdpa_cudnn"].assign(impl="mine")]).to_csv(timing, index=False)
    vouch(timing)
    table, verdict = compare.compare_runs(run, REFERENCE)
    said = table[(table["part"] == "timing") & (table["verdict"] == "not comparable")]
    only = said[said["reason"].str.startswith("only in the run: a grid point or contender")]
    # each pass says its own points: the contender's timed ones (as cuDNN's) in that pass
    cudnn = contract.with_direction(frame[frame["impl"] == "sdpa_cudnn"])
    points = {d: cudnn.loc[cudnn["direction"] == d, "status"].eq("ok").sum() for d in contract.DIRECTIONS}
    assert sorted(only["item"]) == sorted(f"{label_direction(d)}{n} points" for d, n in points.items() if n)
    assert sum(points.values()) > 0
    assert verdict["verdict"] == "agree"


def test_another_gpu_or_none_is_not_comparable_and_not_a_failure(run):
    summary = json.loads((run / "gpu/timing/timing.json").read_text())
    summary["device"] = "NVIDIA A100-SXM4-80GB"
    (run / "gpu/timing/timing.json").write_text(json.dumps(summary))
    vouch(run / "gpu/timing/timing.json")
    table, verdict = compare.compare_runs(run, REFERENCE)
    assert verdict["verdict"] == "agree"
    assert verdict["not_comparable"]["timing"] == ["different GPU models: speed ratios do not travel "
                                                   "between them"]
    summary["device"] = None
    (run / "gpu/timing/timing.json").write_text(json.dumps(summary))
    vouch(run / "gpu/timing/timing.json")
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
    vouch(run / "symbolic/manifest.json")
    _, verdict = compare.compare_runs(run, REFERENCE)
    assert verdict["verdict"] == "agree"  # why numbers could move, never a failure by itself
    assert "symbolic: src/minimodel/symbolic.py (changed)" in verdict["inputs_that_differ"]
    assert "symbolic: environment: torch: 9.9.9 (reference: 2.11.0)" in verdict["inputs_that_differ"]


def test_a_committed_reference_compared_without_out_is_written_to_a_folder_of_its_own(
        reference_untouched, tmp_path, monkeypatch, capsys):
    """A committed reference as the run, no --out: the verdict, its tables in a new temporary
    folder, said; nothing written into the reference. An --out inside it is refused."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.chdir(REFERENCE.parents[2])
    assert compare.main([str(REFERENCE.relative_to(REFERENCE.parents[2]))]) == 0
    said = capsys.readouterr().out.splitlines()
    [out] = [Path(line.split()[2].rstrip(":")) for line in said if line.startswith("  written to ")]
    assert out.parent == tmp_path and out.name.startswith("minimodel-compare-nvidia-h200-nvidia-h200-")
    assert json.loads((out / "verdict.json").read_text())["verdict"] == compare.AGREE
    assert compare.main([str(REFERENCE), "--out", str(REFERENCE / "cmp")]) == 2
    assert "read, never written" in capsys.readouterr().err


def test_a_run_compared_without_out_writes_beside_the_workflows_comparison(run, monkeypatch, capsys):
    """No --out: RUN/compare-<reference's folder name>, said, whether or not the workflow's own
    RUN/compare exists; the same command again replaces it."""
    monkeypatch.chdir(run.parent)
    assert compare.main(["run"]) == 0
    out = run / f"compare-{REFERENCE.name}"
    assert f"  written to {out}: comparison.csv (every row), verdict.json, comparison.png" in \
        capsys.readouterr().out.splitlines()
    assert {p.name for p in out.iterdir()} == {"comparison.csv", "verdict.json", "comparison.png"}
    (out / "verdict.json").write_text("{}")
    assert compare.main([str(run), str(REFERENCE)]) == 0
    assert json.loads((out / "verdict.json").read_text())["verdict"] == compare.AGREE
    assert not (run / "compare").exists()


@pytest.fixture
def cpu_only(run):
    """The copy as a run on a machine without a GPU sees it: correctness under the interpreter (not
    comparable with CUDA's) and no timing, so a tampered GPU table is never looked at row by row."""
    edit_csv(run / "gpu/correctness/correctness.csv", lambda f: f.__setitem__("backend", "interpreter"))
    summary = json.loads((run / "gpu/timing/timing.json").read_text())
    (run / "gpu/timing/timing.json").write_text(json.dumps({**summary, "device": None}))
    vouch(run / "gpu/timing/timing.json")
    return run


def test_a_reference_edited_since_its_manifest_is_refused(cpu_only, tmp_path, capsys):
    reference = tmp_path / "reference"
    shutil.copytree(REFERENCE, reference)
    assert compare.main([str(cpu_only), str(reference), "--out", str(tmp_path / "out")]) == 0
    edit_csv(reference / "gpu/correctness/correctness.csv",
             lambda f: f.loc.__setitem__((0, "passed"), False), vouched=False)
    capsys.readouterr()
    assert compare.main([str(cpu_only), str(reference), "--out", str(tmp_path / "again")]) == 2
    err = capsys.readouterr().err
    assert err == (f"compare: refusing the reference {reference}: gpu/correctness/correctness.csv: bytes "
                   "changed since rule gpu_correctness wrote it; a comparison reads only what the "
                   "reference's own manifests vouch for\n")
    assert not (tmp_path / "again").exists()


def test_a_run_or_reference_manifest_edited_or_missing_an_output_is_refused(run, tmp_path):
    m = json.loads((run / "gpu/timing/manifest.json").read_text())
    m["outputs"][0]["sha256"] = "0" * 64  # the manifest now vouches for other bytes, its own hash stale
    (run / "gpu/timing/manifest.json").write_text(json.dumps(m))
    with pytest.raises(compare.RunError, match=r"refusing the run .*: gpu/timing/manifest.json: the "
                                               "manifest was edited after rule gpu_timing wrote it"):
        compare.compare_runs(run, REFERENCE)
    reference = tmp_path / "reference"
    shutil.copytree(REFERENCE, reference)
    (reference / "gpu/bytes/bytes.csv").unlink()
    with pytest.raises(compare.RunError, match=r"refusing the reference .*: gpu/bytes/bytes.csv: missing, "
                                               "though gpu/bytes/manifest.json records it as an output"):
        compare.compare_runs(REFERENCE, reference)


def test_a_table_no_manifest_vouches_for_is_refused(run):
    (run / "gpu/timing/manifest.json").unlink()  # the rule never completed
    with pytest.raises(compare.RunError, match="gpu/timing/timing.csv: no manifest in the run vouches"):
        compare.compare_runs(run, REFERENCE)


def test_the_code_that_made_a_reference_is_not_asked_about(run):
    """A reference was made by older code: a later change to this checkout must not break a
    comparison against it. Only the bytes its manifests vouch for are checked."""
    for name in contract.COMPARED_MANIFESTS:
        m = json.loads((run / name).read_text())
        for entry in m["inputs"]:
            entry["sha256"] = "0" * 64
        (run / name).write_text(json.dumps(m))
        vouch(run / name)
    assert compare.compare_runs(REFERENCE, run)[1]["verdict"] == "agree"


def test_nothing_compared_is_not_agreement(tmp_path, capsys):
    (tmp_path / "empty" / "symbolic").mkdir(parents=True)
    table, verdict = compare.compare_runs(tmp_path / "empty", REFERENCE)
    assert verdict["verdict"] == "nothing compared" and verdict["compared"] == 0
    assert set(table["verdict"]) == {"not comparable"}
    assert compare.main([str(tmp_path / "empty")]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"{tmp_path / 'empty'} against {compare.REFERENCE}: nothing compared"


def test_a_run_with_only_the_cpu_parts_still_agrees(cpu_only):
    for name in ("gpu/bytes", "gpu/timing", "gpu/correctness"):
        shutil.rmtree(cpu_only / name)
    table, verdict = compare.compare_runs(cpu_only, REFERENCE)
    assert verdict["verdict"] == "agree" and verdict["compared"] > 0
    assert set(table.loc[table["verdict"] == "agree", "part"]) == {"symbolic", "cpu bytes", "cpu profiler"}
    # no summary at all is not a summary that says "no GPU": the stage did not run, or did not finish
    assert verdict["not_comparable"]["timing"] == [
        f"the run has no {contract.TIMING_SUMMARY}: its stage did not run there, or did not finish"]
    assert verdict["not_comparable"]["gpu bytes"] == [
        f"the run has no {contract.GPU_BYTES_SUMMARY}: its stage did not run there, or did not finish"]


def test_a_run_copied_before_its_timing_stage_ended_says_so(run):
    """A folder packed while the timing stage ran: every stage before it, no timing files."""
    shutil.rmtree(run / "gpu/timing")
    table, verdict = compare.compare_runs(run, REFERENCE)
    assert verdict["parts"]["gpu bytes"] == {"agree": verdict["parts"]["gpu bytes"]["agree"]}
    assert verdict["not_comparable"]["timing"] == [
        f"the run has no {contract.TIMING_SUMMARY}: its stage did not run there, or did not finish"]
    assert table.loc[table["part"] == "timing", "verdict"].tolist() == ["not comparable"]


@pytest.fixture
def reference_untouched():
    """Fails the test, and removes it, when something was written into the committed reference."""
    before = {p for p in REFERENCE.rglob("*")}
    yield
    written = {p for p in REFERENCE.rglob("*")} - before
    for path in sorted(written, reverse=True):  # files before their folders
        path.rmdir() if path.is_dir() else path.unlink()
    assert not written, f"written into the committed reference: {sorted(map(str, written))}"


def test_the_cli_never_writes_into_a_committed_reference_from_any_folder(reference_untouched, tmp_path,
                                                                         monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert compare.main([str(REFERENCE), str(REFERENCE)]) == 0
    assert compare.main([str(REFERENCE), str(REFERENCE), "--out", str(REFERENCE / "compare")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"compare: refusing to write into {REFERENCE / 'compare'}: it is inside the committed "
                   f"reference runs ({REFERENCE.parent}), which are read, never written; pass --out with "
                   "a folder of its own"]
    (tmp_path / "link").symlink_to(REFERENCE)  # a symlink, followed before the check
    assert compare.main([str(REFERENCE), "--out", "link/cmp"]) == 2
    assert f"refusing to write into {REFERENCE / 'cmp'}" in capsys.readouterr().err


def test_the_default_reference_is_found_from_any_folder(run, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert compare.main([str(run), "--out", "out"]) == 0
    assert json.loads((tmp_path / "out/verdict.json").read_text())["reference"] == str(REFERENCE)


@pytest.mark.parametrize("vouched, named", [
    (False, "refusing the run {run}: cpu/bytes.csv: bytes changed since rule cpu_bytes wrote it"),
    (True, "{run}/cpu/bytes.csv: lacks the columns bytes_read, bytes_written, o_write_bytes, "
           "bytes_profiler, which the comparison reads"),
])
def test_a_truncated_table_is_one_line_naming_it(run, tmp_path, capsys, vouched, named):
    table = run / "cpu/bytes.csv"
    table.write_bytes(table.read_bytes()[:100])  # cut inside the header, as a full disk would
    if vouched:  # made so by its rule (another version), not edited since
        vouch(table)
    assert compare.main([str(run), str(REFERENCE), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("compare: " + named.format(run=run)) and err.count("\n") == 1


def test_each_part_reads_what_it_declares_and_together_what_the_contract_lists(monkeypatch):
    """What the parts read is what `runs.check_run` checks against the manifests and what the compare
    rule waits for (contract.COMPARED_TABLES, COMPARED_MANIFESTS): a part reading another file would
    trust bytes that no manifest vouched for."""
    assert len({part.NAME for part in compare.PARTS}) == len(compare.PARTS)
    declared = [name for part in compare.PARTS for name in part.READS]
    assert sorted(declared) == sorted(contract.COMPARED_TABLES + runs.OPTIONAL_TABLES
                                      + contract.COMPARED_MANIFESTS)
    read = []

    def recording(real):
        def recorded(folder, *names_and_more):
            read.extend(names_and_more[:1] or runs.MANIFESTS)  # manifests(folder) reads all of them
            return real(folder, *names_and_more)
        return recorded

    for name in ("table", "summary", "text", "manifests"):
        monkeypatch.setattr(runs, name, recording(getattr(runs, name)))
    for part in compare.PARTS:
        read.clear()
        part.compare(REFERENCE, REFERENCE)  # the reference against itself: every file is read
        assert set(read) == set(part.READS), part.NAME


def test_gpu_bytes_older_seed_column_is_read_as_input_seed(run):
    """An older run's gpu/bytes/bytes.csv names each point's input seed `seed`."""
    committed = pd.read_csv(REFERENCE / contract.GPU_BYTES)
    edit_csv(run / contract.GPU_BYTES, lambda f: f.rename(columns={"input_seed": "seed"}, inplace=True))
    read = runs.table(run, contract.GPU_BYTES, ["input_seed", "status"])
    assert "seed" not in read.columns and read["input_seed"].equals(committed["input_seed"])
    assert compare.compare_runs(run, REFERENCE)[1]["verdict"] == "agree"
    edit_csv(run / contract.GPU_BYTES, lambda f: f.insert(0, "input_seed", f["seed"] + 7))  # both: kept
    both = runs.table(run, contract.GPU_BYTES, ["input_seed", "seed"])
    seeds = committed["input_seed"]
    assert both["input_seed"].equals(seeds + 7) and both["seed"].equals(seeds)
    edit_csv(run / contract.CPU_BYTES, lambda f: f.insert(0, "seed", 0))  # another table's: not renamed
    assert "input_seed" not in runs.table(run, contract.CPU_BYTES, ["seed"]).columns


def test_a_grouped_query_case_is_judged_against_its_own_case(run):
    # the grouped-query cases share N and d with the sweep's others: only H_kv tells them apart
    def fail_one_grouped(frame):
        grouped = frame.index[(frame["H_kv"] < frame["H"]) & (frame["impl"] == contract.TRITON)
                              & (frame["direction"] == contract.FORWARD)]
        frame.loc[grouped[0], "passed"] = False

    edit_csv(run / "gpu/correctness/correctness.csv", fail_one_grouped)
    table, verdict = compare.compare_runs(run, REFERENCE)
    bad = table[table["verdict"] == "disagree"]
    assert len(bad) == 1 and "H_kv=1" in bad.iloc[0]["item"], bad.to_dict("records")


def test_a_reference_from_before_the_grouped_query_cases_reads_as_h_kv_equal_to_h(run, tmp_path):
    older = tmp_path / "older"
    shutil.copytree(REFERENCE, older)
    edit_csv(older / "gpu/correctness/correctness.csv",
             lambda f: f.drop(f.index[f["H_kv"] < f["H"]], inplace=True) or f.drop(
                 columns=["H_kv", "layout"], inplace=True))
    table, verdict = compare.compare_runs(run, older)
    assert verdict["verdict"] == "agree", verdict["disagreements"]
    part = table[table["part"] == "correctness"]
    assert (part["verdict"] == "agree").sum() > 0


def test_two_rows_of_one_case_are_refused_not_paired(run):
    edit_csv(run / "gpu/correctness/correctness.csv",
             lambda f: f.loc.__setitem__((1, ["impl", "B", "H", "H_kv", "N", "d", "causal", "dtype", "layout",
                                              "direction"]),
                                         f.loc[0, ["impl", "B", "H", "H_kv", "N", "d", "causal", "dtype",
                                                   "layout", "direction"]].values))
    with pytest.raises(runs.RunError, match="rows share their key"):
        compare.compare_runs(run, REFERENCE)


def test_two_rows_of_one_point_of_an_exact_table_are_refused_not_paired(run):
    edit_csv(run / "symbolic/bytes.csv", lambda f: f.loc.__setitem__(len(f), f.loc[0].values))
    with pytest.raises(runs.RunError, match="symbolic/bytes.csv of the run: 2 rows share their key"):
        compare.compare_runs(run, REFERENCE)


def test_the_figure_reads_each_ratio_against_its_own_band():
    """comparison.png's timing panel: a change at its band's edge reads 1 (or -1), in logs as the
    verdict measures it, whatever the band: lab points at 8 % and kernel/flex at 65 % on one scale."""
    ratios = pd.DataFrame({"run": [1.08, 1 / 1.08, 1.65, 1.04], "reference": [1.0, 1.0, 1.0, 1.0],
                           "tolerance": [0.08, 0.08, 0.65, 0.08]})
    assert against_band(ratios).tolist() == pytest.approx([1.0, -1.0, 1.0, 0.5096], abs=1e-4)

