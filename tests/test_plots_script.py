"""scripts/plots.py draws every figure of contract.FIGURES, and refuses one it has no arguments for."""

import contextlib
import json
import runpy
import types

import pytest
from conftest import ROOT

from minimodel.floor import contract
from minimodel.floor.provenance import manifest
from minimodel.report import backward_plots, correctness_figure, plots

REF = ROOT / "results" / "reference" / "nvidia-h200"
# figures that draw both passes, besides the backward's own: the correctness figure, a panel per pass
# (report/correctness_figure.py)
BOTH_PASSES = {"correctness"}


def _run_script(tmp_path, monkeypatch, timing=REF / contract.TIMING_SUMMARY,
                bytes_summary=REF / contract.GPU_BYTES_SUMMARY, tables=None):
    """scripts/plots.py on the committed reference's tables (or `tables`: name -> path in their
    place), outside a Snakemake job."""
    monkeypatch.setattr(manifest, "stage", lambda _: contextlib.nullcontext())
    tables = {name: REF / name for name in (contract.SYMBOLIC_BYTES, contract.CPU_BYTES, contract.CORRECTNESS,
                                            contract.TIMING, contract.GPU_BYTES)} | (tables or {})
    inp = types.SimpleNamespace(
        symbolic=tables[contract.SYMBOLIC_BYTES], cpu_bytes=tables[contract.CPU_BYTES],
        cpu_ceilings=REF / contract.CPU_CEILINGS, correctness=tables[contract.CORRECTNESS],
        timing_table=tables[contract.TIMING], timing=timing, gpu_bytes=tables[contract.GPU_BYTES],
        gpu_bytes_summary=bytes_summary)
    out = types.SimpleNamespace(**{name: tmp_path / f"{name}.png" for name in contract.FIGURES})
    job = types.SimpleNamespace(input=inp, output=out, params=types.SimpleNamespace(tile=[64, 64]))
    runpy.run_path(str(ROOT / "scripts" / "plots.py"), init_globals={"snakemake": job})


@pytest.fixture(scope="module")
def reference_figures(tmp_path_factory):
    """Every figure drawn from the committed reference's tables, once for the module's tests
    (under pytest-xdist the module is on one worker: conftest's ONE_WORKER)."""
    folder = tmp_path_factory.mktemp("reference_figures")
    with pytest.MonkeyPatch.context() as monkeypatch:
        _run_script(folder, monkeypatch)
    return folder


def test_every_figure_is_drawn(reference_figures):
    assert sorted(p.stem for p in reference_figures.glob("*.png")) == sorted(contract.FIGURES)


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


def test_the_forward_figures_are_byte_identical_with_backward_rows_beside(tmp_path, monkeypatch,
                                                                          reference_figures):
    """The reference's forward rows as a run made before the backward wrote them (no `direction`
    column), then with a `direction` column and backward rows added (copies of the forward's, so
    that a figure reading them would change), then the reference as committed (its own backward and
    forward + backward rows): each draws the forward's figures byte for byte the same (those that
    draw the backward's rows too, the backward's own and `BOTH_PASSES`, aside: the two edited runs
    draw them as a placeholder, but for the backward's timing of the second, which must draw)."""
    import pandas as pd

    before, after = {}, {}
    for name in (contract.CPU_BYTES, contract.SYMBOLIC_BYTES, contract.CORRECTNESS, contract.TIMING,
                 contract.GPU_BYTES):
        frame = contract.forward_rows(pd.read_csv(REF / name, float_precision="round_trip"))
        before[name] = tmp_path / f"before_{name.replace('/', '_')}"
        frame.drop(columns="direction").to_csv(before[name], index=False)
        frame = frame.assign(direction=contract.FORWARD)
        twice = pd.concat([frame, frame.assign(direction=contract.BACKWARD, tflops=frame.get("tflops", 0) * 2)
                           if name == contract.TIMING else frame.assign(direction=contract.BACKWARD)])
        after[name] = tmp_path / f"after_{name.replace('/', '_')}"
        twice.to_csv(after[name], index=False)
    forward_only = [name for name in contract.FIGURES
                    if not name.startswith("backward_") and name not in BOTH_PASSES]
    for side, tables, real in (("before", before, ()), ("after", after, ("backward_tflops_vs_n",))):
        for name in set(contract.FIGURES) - set(forward_only) - set(real):
            for module in (plots, correctness_figure, backward_plots):
                if hasattr(module, name):
                    monkeypatch.setattr(module, name, lambda *_, name=name: (
                        plots.no_gpu_figure(name, "not compared here"), None))
        (tmp_path / side).mkdir()
        _run_script(tmp_path / side, monkeypatch, tables=tables)
        monkeypatch.undo()
    folders = {"before": tmp_path / "before", "after": tmp_path / "after", "reference": reference_figures}
    assert forward_only
    for name in forward_only:
        drawn = {side: (folder / f"{name}.png").read_bytes() for side, folder in folders.items()}
        assert drawn["before"] == drawn["after"] == drawn["reference"], name
    assert (tmp_path / "after" / "backward_tflops_vs_n.png").stat().st_size > 0
