import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from minimodel import manifest


class Namedlist(list):
    """Enough of Snakemake's Namedlist for `stage()`: a list with named members."""

    def __init__(self, items=(), **named):
        super().__init__(list(items) + list(named.values()))
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
        manifest.write_text(smk.output.result, "hello\n")
        st.extra["note"] = "x"
    return smk


def test_sha256_matches_hashlib(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"abc" * 1000)
    assert manifest.sha256_file(p) == hashlib.sha256(b"abc" * 1000).hexdigest()


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
    assert any(p.endswith("minimodel/manifest.py") for p in modules)
    for key in ("python", "torch", "triton", "snakemake", "device"):
        assert key in m["environment"]
    assert set(m["git"]) == {"commit", "dirty"}
    assert m["started"] <= m["finished"]
    assert m["extra"] == {"note": "x"}


def test_verify_passes_then_names_a_tampered_output(tmp_path, monkeypatch):
    smk = run_stage(tmp_path, monkeypatch)
    count, problems = manifest.verify(tmp_path, tmp_path)
    assert (count, problems) == (1, [])
    out = Path(smk.output.result)
    out.write_bytes(b"jello\n")  # one byte changed
    _, problems = manifest.verify(tmp_path, tmp_path)
    assert len(problems) == 1 and "out/result.txt: output bytes changed" in problems[0]
    assert manifest.main(["verify", str(tmp_path), "--root", str(tmp_path)]) == 1


def test_verify_names_an_output_whose_input_changed(tmp_path, monkeypatch):
    smk = run_stage(tmp_path, monkeypatch)
    Path(smk.input.table).write_text("a,b\n1,3\n")
    _, problems = manifest.verify(tmp_path, tmp_path)
    assert problems == [
        "out/manifest.json: out/result.txt: made from an input that changed: data.csv (data, changed)"
    ]


def test_verify_names_a_changed_module(tmp_path, monkeypatch):
    smk = run_stage(tmp_path, monkeypatch)
    m = json.loads(Path(smk.output.manifest).read_text())
    module = next(e for e in m["inputs"] if e["kind"] == "module")
    # pretend the module was hashed differently: as if its source had changed since
    module["sha256"] = "0" * 64
    Path(smk.output.manifest).write_text(json.dumps(m))
    _, problems = manifest.verify(tmp_path, tmp_path)
    assert len(problems) == 1 and "(module, changed)" in problems[0]


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
    with pytest.raises(KeyboardInterrupt), manifest.atomic_write(target) as fh:
        fh.write("half of the new cont")
        raise KeyboardInterrupt
    assert target.read_text() == "old"
    assert list(tmp_path.iterdir()) == [target]


def test_verify_cli_without_manifests(tmp_path, capsys):
    assert manifest.main(["verify", str(tmp_path)]) == 2
    assert "no manifest.json" in capsys.readouterr().err


def test_git_commit_from_the_environment_wins_over_the_checkout(monkeypatch):
    monkeypatch.delenv("MINIMODEL_GIT_COMMIT", raising=False)
    here = manifest.git_state(Path(__file__).parent)
    assert set(here) == {"commit", "dirty"}
    monkeypatch.setenv("MINIMODEL_GIT_COMMIT", "0123abc")
    named = manifest.git_state(Path(__file__).parent)
    assert named["commit"] == "0123abc" and named["source"] == "MINIMODEL_GIT_COMMIT"
    assert named["checkout"] == here


def test_git_state_without_a_repository(tmp_path, monkeypatch):
    monkeypatch.delenv("MINIMODEL_GIT_COMMIT", raising=False)
    assert manifest.git_state(tmp_path) == {"commit": None, "dirty": None}

