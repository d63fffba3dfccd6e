import hashlib
import json
import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from minimodel.floor.provenance import code, io, manifest, project, verify


class Namedlist(list):
    """Enough of Snakemake's Namedlist for `stage()`: a list with named members."""

    def __init__(self, items=(), **named):
        flat = [x for v in named.values() for x in (v if isinstance(v, list) else [v])]
        super().__init__(list(items) + flat)
        self._named = named
        for key, value in named.items():
            setattr(self, key, value)

    def keys(self):
        return self._named.keys()

    def items(self):
        return self._named.items()


def fake_snakemake(tmp_path, rule="demo"):
    (tmp_path / "scripts").mkdir(exist_ok=True)
    (tmp_path / "scripts" / f"{rule}.py").write_text("print('demo')\n")
    data = tmp_path / "data.csv"
    data.write_text("a,b\n1,2\n")
    return SimpleNamespace(
        rule=rule,
        input=Namedlist(table=str(data)),
        output=Namedlist(result=str(tmp_path / "out" / "result.txt"),
                         manifest=str(tmp_path / "out" / "manifest.json")),
        params=Namedlist(cfg={"n": [1, 2]}),
        log=[str(tmp_path / "logs" / f"{rule}.log")],
    )


def run_stage(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    smk = fake_snakemake(tmp_path)
    with manifest.stage(smk, root=tmp_path) as st:
        io.write_text(smk.output.result, "hello\n")
        st.extra["note"] = "x"
    return smk


def test_sha256_matches_hashlib(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"abc" * 1000)
    assert io.sha256_file(p) == hashlib.sha256(b"abc" * 1000).hexdigest()


def test_manifest_records_outputs_inputs_modules_and_environment(tmp_path, monkeypatch):
    smk = run_stage(tmp_path, monkeypatch)
    m = json.loads(Path(smk.output.manifest).read_text())
    assert m["rule"] == "demo"
    assert m["params"] == {"cfg": {"n": [1, 2]}}
    assert [o["path"] for o in m["outputs"]] == ["out/result.txt"]
    assert m["outputs"][0]["sha256"] == hashlib.sha256(b"hello\n").hexdigest()
    assert m["outputs"][0]["size"] == 6
    kinds = {e["kind"] for e in m["inputs"]}
    assert kinds == {"data", "script", "module"}
    modules = [e["path"] for e in m["inputs"] if e["kind"] == "module"]
    assert any(p.endswith("minimodel/floor/provenance/manifest.py") for p in modules)
    for key in ("python", "torch", "triton", "snakemake", "device"):
        assert key in m["environment"]
    assert set(m["git"]) == {"commit", "dirty"}
    assert m["manifest"] == "out/manifest.json"
    assert m[manifest.SELF_HASH] == manifest.content_hash(m)
    assert m["started"] <= m["finished"]
    assert m["extra"] == {"note": "x"}


def test_verify_passes_then_names_a_tampered_output(tmp_path, monkeypatch):
    smk = run_stage(tmp_path, monkeypatch)
    report = verify.check(tmp_path / "out")
    assert (len(report.manifests), report.findings) == (1, [])
    out = Path(smk.output.result)
    out.write_bytes(b"jello\n")  # one byte changed
    assert [str(f) for f in verify.check(tmp_path / "out").findings] == [
        "out/result.txt: bytes differ from what rule demo wrote"]
    assert verify.main([str(tmp_path / "out"), "--root", str(tmp_path)]) == 1


def test_verify_names_an_output_whose_input_changed_as_stale(tmp_path, monkeypatch):
    smk = run_stage(tmp_path, monkeypatch)
    Path(smk.input.table).write_text("a,b\n1,3\n")
    report = verify.check(tmp_path / "out")
    assert [(f.kind, str(f), f.rule) for f in report.findings] == [
        ("stale", "data.csv: data changed", "demo")]
    assert (report.exit_code(), report.exit_code(strict=True)) == (0, 1)


def test_verify_names_a_changed_module(tmp_path, monkeypatch):
    smk = run_stage(tmp_path, monkeypatch)
    m = json.loads(Path(smk.output.manifest).read_text())
    module = next(e for e in m["inputs"] if e["kind"] == "module")
    # pretend the module was hashed differently: as if its source had changed since
    module["sha256"] = "0" * 64
    m[manifest.SELF_HASH] = manifest.content_hash(m)
    Path(smk.output.manifest).write_text(json.dumps(m))
    report = verify.check(tmp_path / "out")
    assert [(f.kind, str(f)) for f in report.findings] == [("stale", f"{module['path']}: module changed")]


def test_failed_stage_writes_no_manifest(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    smk = fake_snakemake(tmp_path)
    with pytest.raises(RuntimeError), manifest.stage(smk, root=tmp_path):
        raise RuntimeError("boom")
    assert not Path(smk.output.manifest).exists()
    assert "boom" in Path(smk.log[0]).read_text()


def test_atomic_write_leaves_nothing_behind_when_interrupted(tmp_path):
    target = tmp_path / "x.txt"
    target.write_text("old")
    with pytest.raises(KeyboardInterrupt), io.atomic_write(target) as fh:
        fh.write("half of the new cont")
        raise KeyboardInterrupt
    assert target.read_text() == "old"
    assert list(tmp_path.iterdir()) == [target]


def test_verify_cli_without_manifests(tmp_path, capsys):
    assert verify.main([str(tmp_path)]) == 2
    assert "holds no manifest.json" in capsys.readouterr().err


def test_python_m_minimodel_hands_each_command_its_own_arguments(tmp_path, monkeypatch, capsys):
    from minimodel import __main__ as cli
    from minimodel.report.compare import cli as compare

    smk = run_stage(tmp_path, monkeypatch)
    assert cli.main(["verify", str(tmp_path / "out"), "--root", str(tmp_path)]) == 0
    Path(smk.output.result).write_text("changed\n")
    assert cli.main(["verify", str(tmp_path / "out")]) == 1
    seen = []
    monkeypatch.setattr(compare, "run", lambda args: seen.append(args) or 0)
    assert cli.main(["compare", "run", "ref", "--out", "x"]) == 0
    assert [(a.run, a.reference, a.out) for a in seen] == [("run", "ref", "x")]
    with pytest.raises(SystemExit) as refused:
        cli.main(["check"])
    assert refused.value.code == 2 and "invalid choice: 'check'" in capsys.readouterr().err
    assert cli.main([]) == 2
    assert "python -m minimodel" in capsys.readouterr().err


def test_git_commit_from_the_environment_wins_over_the_checkout(monkeypatch):
    monkeypatch.delenv("MINIMODEL_GIT_COMMIT", raising=False)
    here = code.git_state(Path(__file__).parent)
    assert set(here) == {"commit", "dirty"}
    monkeypatch.setenv("MINIMODEL_GIT_COMMIT", "0123abc")
    named = code.git_state(Path(__file__).parent)
    assert named["commit"] == "0123abc" and named["source"] == "MINIMODEL_GIT_COMMIT"
    assert named["checkout"] == here


def test_git_state_without_a_repository(tmp_path, monkeypatch):
    monkeypatch.delenv("MINIMODEL_GIT_COMMIT", raising=False)
    assert code.git_state(tmp_path) == {"commit": None, "dirty": None}



def test_an_edited_manifest_is_detected(tmp_path, monkeypatch):
    smk = run_stage(tmp_path, monkeypatch)
    path = Path(smk.output.manifest)
    m = json.loads(path.read_text())
    m["environment"]["device"] = "cuda: something else"  # no hash touched
    path.write_text(json.dumps(m, indent=2))
    assert [str(f) for f in verify.check(tmp_path / "out").damaged] == [
        "out/manifest.json: the manifest was edited after rule demo wrote it"]


def test_a_corrupt_manifest_is_named_not_a_traceback(tmp_path, monkeypatch):
    smk = run_stage(tmp_path, monkeypatch)
    Path(smk.output.manifest).write_text('{"rule": "demo", "outputs": [')
    problems = [str(f) for f in verify.check(tmp_path / "out").damaged]
    assert len(problems) == 1 and "is not a readable manifest (JSONDecodeError" in problems[0]


def test_verify_from_another_directory_finds_the_root_from_the_manifest(tmp_path, monkeypatch):
    smk = run_stage(tmp_path, monkeypatch)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert verify.main([str(tmp_path / "out"), "--strict"]) == 0
    Path(smk.output.result).write_text("changed\n")
    assert verify.main([str(tmp_path / "out")]) == 1


def consumer(tmp_path, made_by):
    """A second rule reading the first rule's output."""
    smk = fake_snakemake(tmp_path, rule="consumer")
    smk.input = Namedlist(table=made_by.output.result)
    smk.output = Namedlist(result=str(tmp_path / "out2" / "result.txt"),
                           manifest=str(tmp_path / "out2" / "manifest.json"))
    return smk


def test_a_tampered_input_is_refused_naming_the_rule_that_made_it(tmp_path, monkeypatch):
    made = run_stage(tmp_path, monkeypatch)
    Path(made.output.result).write_text("jello\n")
    smk = consumer(tmp_path, made)
    ran = []
    with pytest.raises(SystemExit) as err, manifest.stage(smk, root=tmp_path):
        ran.append(True)
    message = str(err.value)
    assert "refusing input out/result.txt, made by rule demo" in message
    assert "output bytes changed since rule demo wrote it" in message
    assert "run `snakemake` again, and it re-runs rule demo" in message  # one more run repairs it
    assert not ran and not Path(smk.output.manifest).exists()
    # the manifest that no longer vouches for its outputs is gone: the next run re-makes them
    assert not Path(made.output.manifest).exists()


def test_a_stale_input_is_refused(tmp_path, monkeypatch):
    made = run_stage(tmp_path, monkeypatch)
    smk = consumer(tmp_path, made)
    Path(made.input.table).write_text("a,b\n9,9\n")  # what the first rule read has changed
    with pytest.raises(SystemExit, match="made from an input that changed: data.csv"), \
            manifest.stage(smk, root=tmp_path):
        pass


def test_an_input_under_a_corrupt_manifest_is_refused_naming_the_file(tmp_path, monkeypatch):
    made = run_stage(tmp_path, monkeypatch)
    Path(made.output.manifest).write_text("not json")
    with pytest.raises(SystemExit, match="out/manifest.json is not a readable manifest"), \
            manifest.stage(consumer(tmp_path, made), root=tmp_path):
        pass
    assert not Path(made.output.manifest).exists()


def test_a_vouched_input_is_read(tmp_path, monkeypatch):
    made = run_stage(tmp_path, monkeypatch)
    smk = consumer(tmp_path, made)
    with manifest.stage(smk, root=tmp_path):
        io.write_text(smk.output.result, Path(made.output.result).read_text())
    m = json.loads(Path(smk.output.manifest).read_text())
    assert {"path": "out/result.txt", "kind": "data"}.items() <= m["inputs"][0].items()


def test_outputs_get_the_mode_of_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        io.write_text(tmp_path / "a.txt", "x")
        os.umask(0o077)
        io.write_text(tmp_path / "b.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "b.txt").stat().st_mode) == 0o600


def test_a_stage_removes_what_a_killed_write_left(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    smk = fake_snakemake(tmp_path)
    left = Path(smk.output.result).parent / ".result.txt.abc123.tmp"
    left.parent.mkdir(parents=True)
    left.write_text("half")
    with manifest.stage(smk, root=tmp_path):
        io.write_text(smk.output.result, "hello\n")
    assert not left.exists() and Path(smk.output.result).read_text() == "hello\n"


def test_code_from_another_tree_is_refused(tmp_path):
    (tmp_path / "src" / "minimodel").mkdir(parents=True)
    with pytest.raises(manifest.ProvenanceError, match="but Python imported minimodel from"):
        code.check_code_tree(tmp_path)
    code.check_code_tree(project.ROOT)  # this checkout: fine


def test_a_result_without_a_manifest_is_refused(tmp_path, monkeypatch):
    made = run_stage(tmp_path, monkeypatch)
    Path(made.output.manifest).unlink()  # its rule never completed, or another reader withdrew it
    with pytest.raises(manifest.ProvenanceError, match="no manifest vouches for input") as err:
        manifest.check_inputs([made.output.result], tmp_path, results_dir=tmp_path / "out")
    # another job of the same run withdrew it (as rule plots meets it after rule readme's refusal)
    assert "removed its manifest; run `snakemake` again" in str(err.value)
    manifest.check_inputs([made.input.table], tmp_path, results_dir=tmp_path / "out")  # a source


def test_a_source_outside_the_project_and_the_run_is_taken_as_it_is(tmp_path):
    """A contender's helper in a folder of the user's, below someone else's manifest.json: that
    file is not this workflow's, so it neither refuses the input nor is removed."""
    project, kernels = tmp_path / "project", tmp_path / "kernels"
    (kernels / "lib").mkdir(parents=True)
    project.mkdir()
    theirs = kernels / "manifest.json"
    theirs.write_text('{"name": "a web app"}')
    (kernels / "lib" / "my_attn.py").write_text("SCALE = 1.0\n")
    manifest.check_inputs([str(kernels / "lib" / "my_attn.py")], project, results_dir=project / "results")
    assert theirs.read_text() == '{"name": "a web app"}'


def test_code_closure_follows_imports_through_the_package(tmp_path):
    src = tmp_path / "src" / "minimodel"
    (src / "sub").mkdir(parents=True)
    for name, text in {"__init__.py": "", "a.py": "from minimodel import b\n", "b.py": "",
                       "c.py": "", "sub/__init__.py": "", "sub/d.py": "import os\n"}.items():
        (src / name).write_text(text)
    script = tmp_path / "script.py"
    script.write_text("import minimodel.a\n\ndef f():\n    from minimodel.sub.d import x\n")
    found = {Path(p).relative_to(tmp_path).as_posix() for p in code.code_closure(script, src)}
    assert found == {"script.py", "src/minimodel/__init__.py", "src/minimodel/a.py",
                     "src/minimodel/b.py", "src/minimodel/sub/__init__.py", "src/minimodel/sub/d.py"}


def test_a_module_imported_but_not_listed_as_code_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    smk = fake_snakemake(tmp_path)
    smk.input = Namedlist(table=smk.input.table, code=[str(tmp_path / "scripts" / "demo.py")])
    with pytest.raises(SystemExit, match="which its code inputs .* do not list"), \
            manifest.stage(smk, root=tmp_path):
        io.write_text(smk.output.result, "x")


@pytest.mark.parametrize("edit, named", [
    ({"outputs": [1, 2]}, "outputs[0] is 1, not an object with path, sha256 as strings"),
    ({"inputs": {"a": 1}}, "inputs is {'a': 1}, not a list"),
    ({"rule": ["demo"]}, "rule is ['demo'], not a string"),
    ({"manifest": 7}, "manifest (its own path) is 7, not a string"),
])
def test_a_manifest_of_the_wrong_shape_is_one_line_naming_it(tmp_path, monkeypatch, capsys, edit, named):
    smk = run_stage(tmp_path, monkeypatch)
    path = Path(smk.output.manifest)
    path.write_text(json.dumps({**json.loads(path.read_text()), **edit}))
    assert verify.main([str(tmp_path / "out")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"damaged  out/manifest.json: is not a manifest: {named}"
    assert out[1:] == ["1 manifest checked under out: 1 damaged, nothing stale; exit 1"]


def test_a_copied_run_vouches_for_its_inputs_where_it_lies_now(tmp_path):
    """A stage rerun in a copy of a run (results/<copy>, as a rerun of one stage of the reference
    is made) reads the copy's manifests at the copy's paths; an edited table there is still refused."""
    import shutil

    from conftest import REFERENCE, ROOT

    copy = ROOT / "results" / f".copy-{tmp_path.name}"  # inside the project, as results_dir must be
    shutil.copytree(REFERENCE, copy)
    try:
        inputs = [str(copy / "cpu" / "roofline" / "ceilings.json"),
                  str(copy / "gpu" / "correctness" / "correctness.json")]
        manifest.check_inputs(inputs, ROOT, results_dir=copy, outputs_only=tuple(inputs))
        (copy / "cpu" / "roofline" / "ceilings.json").write_text("{}")
        with pytest.raises(manifest.ProvenanceError, match="output bytes changed"):
            manifest.check_inputs(inputs, ROOT, results_dir=copy, outputs_only=tuple(inputs))
    finally:
        shutil.rmtree(copy)
