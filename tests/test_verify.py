"""`python -m minimodel verify` and the workflow's `verify` rule: damage, staleness, environment."""

import os
import runpy
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_manifest import Namedlist

from minimodel import __main__ as cli
from minimodel.floor.provenance import io, manifest, verify
from minimodel.floor.provenance.reading import find_manifests, load_manifest

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "results" / "reference" / "nvidia-h200"
ENV = {"python": "3.12.3", "torch": "9.9", "device": "cuda: Some Other GPU",
       "gpu": {"name": "Some Other GPU", "driver": "999.1", "cuda_runtime": "99.0"}, "host": "elsewhere"}


def write_rule(root: Path, rule: str, outputs: dict, inputs=(), modules=(), run: str = "results") -> Path:
    """What rule `rule` leaves in the checkout `root`: its outputs, and its manifest beside them,
    in the run folder `run` (relative to `root`)."""
    folder = root / run / rule
    for name, text in outputs.items():
        io.write_text(folder / name, text)
    (root / "scripts").mkdir(exist_ok=True)
    (root / "scripts" / f"{rule}.py").write_text(f"# rule {rule}\n")
    path = folder / "manifest.json"
    io.write_json(path, manifest.build_manifest(
        rule=rule, command=f"python scripts/{rule}.py", outputs=[folder / n for n in outputs],
        inputs=list(inputs), script=root / "scripts" / f"{rule}.py", params={}, started="",
        root=root, path=path, modules=list(modules)))
    return path


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A checkout with a run of two rules: `first` writes a table, `second` reads it, a helper
    module of the project and a contender's module outside the run. Made on another machine."""
    monkeypatch.setattr(manifest, "environment", lambda: ENV)
    root = tmp_path / "checkout"
    (root / "lib").mkdir(parents=True)
    (root / "lib" / "helper.py").write_text("X = 1\n")
    (root / "contender.py").write_text("def attention(q, k, v, causal): ...\n")
    write_rule(root, "first", {"table.csv": "a\n1\n"}, modules=[root / "lib" / "helper.py"])
    write_rule(root, "second", {"out.txt": "1\n"},
               inputs=[root / "results" / "first" / "table.csv", root / "contender.py"],
               modules=[root / "lib" / "helper.py"])
    monkeypatch.chdir(root)
    return root


def findings(report, kind):
    return sorted((f.path, f.what, f.rule) for f in report.findings if f.kind == kind)


def test_an_intact_run_from_another_machine_passes_and_shows_its_environment(checkout, capsys):
    assert cli.main(["verify"]) == 0  # the default folder: results, where verify is run
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("environment  cuda: Some Other GPU, driver 999.1, CUDA 99.0, torch 9.9, "
                      "python 3.12.3, host elsewhere (every rule; recorded, not checked)")
    assert out[-1] == "2 manifests checked under results: nothing damaged, nothing stale; exit 0"
    assert cli.main(["verify", "--strict"]) == 0


def test_a_tampered_output_is_damage_naming_it(checkout, capsys):
    (checkout / "results" / "second" / "out.txt").write_text("2\n")
    assert cli.main(["verify"]) == 1
    out = capsys.readouterr().out
    assert "damaged  results/second/out.txt: bytes differ from what rule second wrote\n" in out
    assert "1 damaged, nothing stale; exit 1" in out


@pytest.mark.parametrize("change, what", [
    (Path.unlink, "missing, an output of rule first"),
    (lambda p: p.write_text("a\n3\n"), "bytes differ from what rule first wrote")])
def test_a_deleted_or_edited_table_is_damage_named_once(checkout, change, what):
    change(checkout / "results" / "first" / "table.csv")
    assert cli.main(["verify", "results"]) == 1
    # named once, by the rule that wrote it, though another rule read it too
    assert findings(verify.check("results"), verify.DAMAGED) == [("results/first/table.csv", what, "first")]


def test_a_changed_module_is_stale_not_damage(checkout, capsys):
    (checkout / "lib" / "helper.py").write_text("X = 2\n")
    (checkout / "contender.py").write_text("def attention(q, k, v, causal): return q\n")
    assert cli.main(["verify"]) == 0
    out = capsys.readouterr().out
    assert "stale    lib/helper.py: module changed since rules first, second ran\n" in out
    # a contender's module (or a helper it imports), recorded among the data inputs: code
    assert "stale    contender.py: contender code changed since rule second ran\n" in out
    assert "nothing damaged, 2 stale" in out and "exit 0 (--strict: 1)" in out
    assert cli.main(["verify", "--strict"]) == 1
    assert verify.check("results").damaged == []


def test_a_table_re_made_by_its_rule_leaves_its_reader_stale(checkout):
    write_rule(checkout, "first", {"table.csv": "a\n2\n"}, modules=[checkout / "lib" / "helper.py"])
    report = verify.check("results")
    assert findings(report, verify.DAMAGED) == []
    assert findings(report, verify.STALE) == [
        ("results/first/table.csv", "data re-made by rule first", "second")]
    assert report.exit_code() == 0 and report.exit_code(strict=True) == 1


def test_an_edited_manifest_is_damage(checkout):
    path = checkout / "results" / "first" / "manifest.json"
    path.write_text(path.read_text().replace('"command": "python', '"command": "python3'))
    report = verify.check("results")
    assert findings(report, verify.DAMAGED) == [
        ("results/first/manifest.json", "the manifest was edited after rule first wrote it", "first")]


def test_a_moved_checkout_and_a_copied_run_folder_still_verify(checkout, tmp_path, monkeypatch, capsys):
    moved = tmp_path / "moved"
    shutil.copytree(checkout, moved)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["verify", "moved/results"]) == 0  # each manifest finds its checkout
    copy = tmp_path / "copy-of-run"
    shutil.copytree(checkout / "results", copy)
    assert cli.main(["verify", str(copy), "--root", str(checkout), "--strict"]) == 0
    monkeypatch.chdir(checkout)  # or run from the checkout: its inputs are read there
    assert cli.main(["verify", str(copy), "--strict"]) == 0
    (copy / "second" / "out.txt").write_text("tampered\n")
    assert cli.main(["verify", str(copy)]) == 1
    assert f"damaged  {copy}/second/out.txt: bytes differ" in capsys.readouterr().out


@pytest.fixture
def reruns(tmp_path, monkeypatch):
    """A checkout whose run made in `results/rerun-1` (rules of the workflow's layout: symbolic,
    plots reading its table, compare reading it and a reference run's) was moved since into
    `results/reruns/rerun-1`, as committed reruns are."""
    monkeypatch.setattr(manifest, "environment", lambda: ENV)
    root = tmp_path / "checkout"
    reference = "results/reference/m"
    write_rule(root, "symbolic", {"bytes.csv": "n\n0\n"}, run=reference)
    made = root / "results" / "rerun-1"
    write_rule(root, "symbolic", {"bytes.csv": "n\n1\n"}, run="results/rerun-1")
    table = made / "symbolic" / "bytes.csv"
    write_rule(root, "plots", {"fig.png": "png"}, inputs=[table], run="results/rerun-1")
    write_rule(root, "compare", {"verdict.json": "{}"}, run="results/rerun-1",
               inputs=[table, root / reference / "symbolic" / "bytes.csv"])
    (root / "results" / "reruns").mkdir()
    shutil.move(made, root / "results" / "reruns" / "rerun-1")
    monkeypatch.chdir(root)
    return root


def test_a_run_moved_into_another_run_folder_verifies_where_it_now_is(reruns, capsys):
    # each manifest's run is found from its rule's folder in the layout: `results/rerun-1/...` is
    # read at `results/reruns/rerun-1/...`, and the reference it read where it always was
    assert cli.main(["verify", "results", "--strict"]) == 0
    assert cli.main(["verify", "results/reruns/rerun-1", "--strict"]) == 0
    assert cli.main(["verify", "results/reruns/rerun-1/compare", "--strict"]) == 0
    assert "3 manifests checked under results: nothing damaged, nothing stale" in capsys.readouterr().out


def test_a_moved_run_still_shows_what_was_tampered_with(reruns):
    moved = Path("results/reruns/rerun-1")
    (moved / "symbolic" / "bytes.csv").write_text("n\n2\n")
    (moved / "plots" / "fig.png").unlink()
    assert findings(verify.check("results"), verify.DAMAGED) == [
        (f"{moved}/plots/fig.png", "missing, an output of rule plots", "plots"),
        (f"{moved}/symbolic/bytes.csv", "bytes differ from what rule symbolic wrote", "symbolic")]
    # the reference a moved run read is outside it: changed, the run is stale, not damaged
    Path("results/reference/m/symbolic/bytes.csv").write_text("n\n9\n")
    (moved / "symbolic" / "bytes.csv").write_text("n\n1\n")
    (moved / "plots" / "fig.png").write_text("png")
    report = verify.check(moved)
    assert report.damaged == []
    assert findings(report, verify.STALE) == [
        ("results/reference/m/symbolic/bytes.csv", "data changed", "compare")]


def test_a_checkout_holding_a_moved_run_verifies_when_moved_itself(reruns, tmp_path, monkeypatch):
    moved = tmp_path / "elsewhere" / "checkout"
    shutil.copytree(reruns, moved)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["verify", str(moved / "results"), "--root", str(moved), "--strict"]) == 0
    monkeypatch.chdir(moved)
    assert cli.main(["verify", "results", "--strict"]) == 0
    (moved / "results" / "reruns" / "rerun-1" / "compare" / "verdict.json").write_text('{"verdict": 1}')
    assert cli.main(["verify", "results"]) == 1


def test_a_stage_folder_moved_within_a_run_is_read_where_it_lies_and_missed_by_its_readers(reruns):
    """A rule's folder moved deeper into its run: its manifest still vouches for its outputs where
    they lie now; the rules that read them find them missing."""
    odd = Path("results/reruns/rerun-1/old/symbolic")
    shutil.move("results/reruns/rerun-1/symbolic", odd)
    damaged = findings(verify.check("results"), verify.DAMAGED)
    assert ("results/reruns/rerun-1/old/symbolic/bytes.csv", "bytes differ from what rule symbolic wrote",
            "symbolic") not in damaged
    assert ("results/reruns/rerun-1/symbolic/bytes.csv", "missing", "plots") in damaged


def test_a_copied_run_without_its_checkout_is_intact_and_says_where_to_look(checkout, tmp_path,
                                                                              monkeypatch, capsys):
    copy = tmp_path / "away" / "run"
    shutil.copytree(checkout / "results", copy)
    monkeypatch.chdir(copy.parent)
    assert cli.main(["verify", "run"]) == 0
    out = capsys.readouterr().out
    assert "stale    lib/helper.py: module not found here since rules first, second ran" in out
    assert "name it with --root" in out


def expected_stale(folder: Path) -> set[tuple[str, str]]:
    """(file, rule) for every input from outside the run whose bytes differ from the record."""
    found = set()
    for path in find_manifests(folder):
        m = load_manifest(path)
        for entry in m["inputs"]:
            file = ROOT / entry["path"]
            if not entry["path"].startswith("results/") and (
                    not file.is_file() or io.sha256_file(file) != entry["sha256"]):
                found.add((entry["path"], m["rule"]))
    return found


def test_the_committed_reference_passes_plain_verify_and_names_its_stale_code(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert cli.main(["verify", str(REFERENCE.relative_to(ROOT))]) == 0
    out = capsys.readouterr().out.splitlines()
    assert not [line for line in out if line.startswith("damaged")]
    report = verify.check(REFERENCE)
    assert report.damaged == [] and len(report.manifests) == len(find_manifests(REFERENCE))
    assert {(f.path, f.rule) for f in report.stale} == expected_stale(REFERENCE)
    for path in {f.path for f in report.stale}:
        assert any(line.startswith(f"stale    {path}: ") for line in out)
    assert any(line.startswith("environment  cuda: NVIDIA H200") for line in out)
    assert cli.main(["verify", str(REFERENCE), "--strict"]) == (1 if report.stale else 0)


def test_a_copy_of_the_reference_verifies_as_the_reference_does(tmp_path, monkeypatch):
    copy = tmp_path / "h200"
    shutil.copytree(REFERENCE, copy)
    monkeypatch.chdir(ROOT)
    stale = {(f.what, f.rule, f.path) for f in verify.check(REFERENCE).stale}
    assert {(f.what, f.rule, f.path) for f in verify.check(copy).stale} == stale
    assert verify.check(copy).damaged == []
    (copy / "gpu" / "timing" / "timing.csv").write_bytes(b"x")
    assert [str(f) for f in verify.check(copy).damaged] == [
        f"{copy}/gpu/timing/timing.csv: bytes differ from what rule gpu_timing wrote"]


def rule_verify(root: Path):
    """The workflow's verify rule, on the run in `root`/results (its script, through `stage`)."""
    manifests = [str(p) for p in find_manifests(root / "results")]
    smk = SimpleNamespace(
        rule="verify", input=Namedlist(manifests=manifests),
        output=Namedlist(report=str(root / "results" / "verify" / "verify.txt"),
                         manifest=str(root / "results" / "verify" / "manifest.json")),
        params=Namedlist(results=str(root / "results")), log=[str(root / "results" / "logs" / "verify.log")],
        config={"results_dir": "results"})
    runpy.run_path(str(ROOT / "scripts" / "verify.py"), init_globals={"snakemake": smk})
    return Path(smk.output.report)


def test_the_verify_rule_lists_what_is_stale_and_passes(checkout, capsys):
    (checkout / "lib" / "helper.py").write_text("X = 2\n")
    report = rule_verify(checkout).read_text().splitlines()
    cli.main(["verify", "results"])
    said = capsys.readouterr().out.splitlines()
    # the same classification, in the same words, as the command's
    assert [line for line in report if line.startswith("stale")] == \
        [line for line in said if line.startswith("stale")] == \
        ["stale    lib/helper.py: module changed since rules first, second ran"]
    assert report[0] == f"ok {checkout}/results/first/manifest.json"
    assert load_manifest(checkout / "results" / "verify" / "manifest.json")["rule"] == "verify"


def test_the_verify_rule_fails_on_damage_naming_it(checkout):
    (checkout / "results" / "second" / "out.txt").write_text("2\n")
    (checkout / "lib" / "helper.py").write_text("X = 2\n")
    with pytest.raises(SystemExit) as failed:
        rule_verify(checkout)
    said = str(failed.value).splitlines()
    assert "damaged  results/second/out.txt: bytes differ from what rule second wrote" in said
    assert "stale    lib/helper.py: module changed since rules first, second ran" in said
    assert not (checkout / "results" / "verify" / "verify.txt").exists()
    # the manifest that no longer vouches for its outputs is gone: the next run re-makes them
    assert not (checkout / "results" / "second" / "manifest.json").exists()
    assert (checkout / "results" / "first" / "manifest.json").exists()


def test_python_m_minimodel_help_lists_each_command_on_stdout(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--help"])
    assert done.value.code == 0
    out, err = capsys.readouterr()
    assert err == ""
    for name, module in cli.COMMANDS.items():
        summary = " ".join(getattr(module, "DESCRIPTION", module.__doc__).split(".")[0].split())
        assert name in out and summary[:40] in " ".join(out.split())
    assert cli.main([]) == 2 and "verify" in capsys.readouterr().err


@pytest.mark.parametrize("command, says", [
    ("verify", ["default: results, relative to the directory", "exit codes:", "--strict",
                "damaged", "stale", "environment"]),
    ("compare", ["reference", "--out", "exit 0", "exits 2"]),
])
def test_each_command_explains_itself(capsys, command, says):
    with pytest.raises(SystemExit) as done:
        cli.main([command, "--help"])
    assert done.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith(f"usage: python -m minimodel {command}")
    for words in says:
        assert " ".join(words.split()) in out


def test_verify_without_manifests_exits_2_and_checks_a_reference_alone(tmp_path, monkeypatch, capsys):
    assert cli.main(["verify", str(tmp_path)]) == 2 and "holds no manifest.json" in capsys.readouterr().err
    assert cli.main(["verify", str(tmp_path / "x")]) == 2 and "is not a folder" in capsys.readouterr().err
    # a fresh clone's results, before `make run`: the committed reference is what `make verify` checks
    ref = shutil.copytree(REFERENCE, tmp_path / "results" / "reference" / "nvidia-h200")
    monkeypatch.chdir(ROOT)
    assert cli.main(["verify", str(tmp_path / "results")]) == 0
    out = capsys.readouterr().out
    assert "holds no run of its own yet" in out and ": nothing damaged, " in out.splitlines()[-1]
    (ref / "gpu" / "timing" / "timing.csv").write_bytes(b"x")
    assert cli.main(["verify", str(tmp_path / "results")]) == 1
    assert f"damaged  {ref}/gpu/timing/timing.csv" in capsys.readouterr().out


def test_the_commands_as_a_user_runs_them(tmp_path):
    """`python -m minimodel ...` in a shell: help and the report on stdout, the exit codes."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

    def run(*args):
        return subprocess.run([sys.executable, "-m", "minimodel", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True)
    helped = run("--help")
    assert (helped.returncode, helped.stderr) == (0, "")
    assert "verify" in helped.stdout and "compare" in helped.stdout
    checked = run("verify", str(REFERENCE.relative_to(ROOT)))
    assert (checked.returncode, checked.stderr) == (0, "")
    assert checked.stdout.splitlines()[-1].startswith(
        f"{len(find_manifests(REFERENCE))} manifests checked under results/reference/")
    nothing = run("verify", str(tmp_path))
    assert nothing.returncode == 2 and nothing.stdout == "" and "holds no manifest.json" in nothing.stderr
