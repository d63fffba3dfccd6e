"""scripts/plots.py draws every figure of contract.FIGURES, and refuses one it has no arguments for."""

import contextlib
import json
import runpy
import types

import pytest
from conftest import ROOT

from minimodel import contract
from minimodel.provenance import manifest

REF = ROOT / "results" / "reference" / "nvidia-h200"


def _run_script(tmp_path, monkeypatch, timing=REF / contract.TIMING_SUMMARY,
                bytes_summary=REF / contract.GPU_BYTES_SUMMARY):
    """scripts/plots.py on the committed reference's tables, outside a Snakemake job."""
    monkeypatch.setattr(manifest, "stage", lambda _: contextlib.nullcontext())
    inp = types.SimpleNamespace(
        symbolic=REF / contract.SYMBOLIC_BYTES, cpu_bytes=REF / contract.CPU_BYTES,
        cpu_ceilings=REF / contract.CPU_CEILINGS, correctness=REF / contract.CORRECTNESS,
        timing_table=REF / contract.TIMING, timing=timing, gpu_bytes=REF / contract.GPU_BYTES,
        gpu_bytes_summary=bytes_summary)
    out = types.SimpleNamespace(**{name: tmp_path / f"{name}.png" for name in contract.FIGURES})
    job = types.SimpleNamespace(input=inp, output=out, params=types.SimpleNamespace(tile=[64, 64]))
    runpy.run_path(str(ROOT / "scripts" / "plots.py"), init_globals={"snakemake": job})


def test_every_figure_is_drawn(tmp_path, monkeypatch):
    _run_script(tmp_path, monkeypatch)
    assert sorted(p.stem for p in tmp_path.glob("*.png")) == sorted(contract.FIGURES)


def test_without_a_gpu_every_figure_is_drawn_too(tmp_path, monkeypatch):
    timing, summary = tmp_path / "timing.json", tmp_path / "bytes.json"
    timing.write_text(json.dumps({"device": None, "status": contract.NO_GPU_TIMING}))
    summary.write_text(json.dumps({"measured": False, "status": f"{contract.NOT_MEASURED}: no CUDA device"}))
    _run_script(tmp_path, monkeypatch, timing, summary)
    assert sorted(p.stem for p in tmp_path.glob("*.png")) == sorted(contract.FIGURES)


def test_a_figure_the_script_has_no_arguments_for_is_refused(tmp_path, monkeypatch):
    monkeypatch.setitem(contract.FIGURES, "new_figure", "GPU kernel")
    with pytest.raises(ValueError, match="new_figure"):
        _run_script(tmp_path, monkeypatch)
    assert not list(tmp_path.glob("*.png"))
