"""Each figure is drawn from the table it claims; without GPU timing the GPU figures say so."""

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from minimodel import symbolic
from minimodel.floor import contract
from minimodel.floor.byte_model import forward as forward_model
from minimodel.report import correctness_figure, plots

REF = Path(__file__).resolve().parents[1] / "results" / "reference" / "nvidia-h200"


def cpu_bytes_table():
    from minimodel.cpu import bytecount

    return pd.DataFrame([bytecount.measure(s, n, d, "float32") for s in ("naive", "flash")
                         for n in (256, 512) for d in (64,)])


def plotted_points(ax):
    """(x, y) of every line and scatter collection on an axis."""
    pts = [line.get_xydata() for line in ax.get_lines()]
    pts += [c.get_offsets() for c in ax.collections if len(c.get_offsets())]
    return np.concatenate([p for p in pts if len(p)])


def test_bytes_vs_n_plots_the_model_and_the_measurements():
    table = cpu_bytes_table()
    fig, data = plots.bytes_vs_n(table, "test machine")
    ax = fig.axes[0]
    pts = {tuple(p) for p in plotted_points(ax)}
    for _, r in table.iterrows():
        assert (r["N"], r["bytes_model"]) in pts
        assert (r["N"], r["bytes_instrumented"]) in pts
    assert "test machine" in fig._suptitle.get_text()
    plt.close(fig)


def test_intensity_ratio_is_naive_over_flash_bytes():
    table = symbolic.byte_table([256, 1024], [64], [(64, 64)], ["float32"])
    fig, data = plots.intensity_ratio(table, (64, 64))
    for _, r in data.iterrows():
        expected = (forward_model.model_bytes("naive", r["N"], 64, 64, 64, 4)
                    / forward_model.model_bytes("flash", r["N"], 64, 64, 64, 4))
        assert r["ratio"] == pytest.approx(expected)
    ys = plotted_points(fig.axes[0])[:, 1]
    assert any(np.isclose(ys, data["ratio"].iloc[0]))
    plt.close(fig)


def test_roofline_without_gpu_has_one_panel_from_the_ceilings():
    ceilings = {"device": "cpu: X", "peak_flops_per_s": 1e11, "bandwidth_bytes_per_s": 1e10,
                "prediction": {"N": 256, "d": 64},
                "references": {s: {"intensity": i, "achieved_flops_per_s": f, "median_s": 1.0}
                               for s, i, f in (("naive", 10.0, 5e10), ("flash", 20.0, 1e9))}}
    fig, points = plots.roofline(ceilings, None, None)
    assert len(fig.axes) == 1
    assert set(points["achieved_flops_per_s"]) == {5e10, 1e9}
    plt.close(fig)


def test_no_gpu_figure_says_so():
    fig = plots.no_gpu_figure("tflops_vs_n", contract.NO_GPU_TIMING)
    texts = " ".join(t.get_text() for t in fig.axes[0].texts)
    assert "no CUDA device" in texts
    plt.close(fig)


def correctness_row(impl, causal, dtype="float16", err=1e-4, err_torch=2e-4, **values):
    row = {"impl": impl, "B": 1, "H": 2, "N": 64, "d": 64, "causal": causal, "dtype": dtype,
           "skipped": False, "reason": "", "backend": "interpreter", "err_kernel_vs_fp64": err,
           "err_torch_vs_fp64": err_torch,
           "tolerance": None if err_torch is None else max(1e-3, 2 * err_torch)}
    row["passed"] = err is not None and row["tolerance"] is not None and err <= row["tolerance"]
    return {**row, **values}


def panel_points(fig, title_start):
    """The (x, y) of the markers on the panel whose title starts with `title_start`."""
    (ax,) = [ax for ax in fig.axes if ax.get_title().startswith(title_start)]
    pts = [c.get_offsets() for c in ax.collections if len(c.get_offsets())]
    return np.concatenate(pts) if pts else np.empty((0, 2))


def test_correctness_figure_draws_both_dtypes_and_says_which_cases_were_skipped():
    skip = "tl.dot on bf16 operands is wrong under Triton's interpreter (3.6)"
    rows = pd.DataFrame([correctness_row("triton", False, err=1e-4), correctness_row("triton", True, err=0.0),
                         correctness_row("triton", False, "bfloat16", err=None, err_torch=None,
                                         skipped=True, passed=None, reason=skip)])
    fig, data = correctness_figure.correctness(rows, "m")
    assert len(data) == 3 and set(data["dtype"]) == {"float16", "bfloat16"}
    assert sorted(data["verdict"]) == ["pass", "pass", "skipped"]
    assert list(data["case"]) == ["fp16 d=64 N=64", "fp16 d=64 N=64 causal", "bf16 d=64 N=64"]
    ys = sorted(panel_points(fig, "this kernel")[:, 1])
    assert ys == [correctness_figure.RATIO_FLOOR, 1e-4 / 1e-3]  # error over tolerance; an exact 0: the floor
    assert fig.axes[0].get_title() == "this kernel (Triton), forward: 2 of 2 cases pass; 1 skipped"
    legend = " ".join(t.get_text() for t in fig.legends[0].get_texts()).replace("\n", " ")
    assert f"skipped: {skip}" in legend
    ticks = [t.get_text() for t in fig.axes[-1].get_xticklabels()]
    assert ticks == list(data["case"])  # the skipped case keeps its place on the axis
    plt.close(fig)


def test_correctness_figure_says_a_contender_failed_every_case():
    rows = pd.DataFrame(
        [correctness_row("triton", c) for c in (False, True)]
        # the same error as the kernel: drawn in a panel of its own, not under the kernel's markers
        + [correctness_row("plain", c) for c in (False, True)]
        + [correctness_row("unscaled", False, err=0.05),
           correctness_row("unscaled", True, err=None, passed=False, reason="raised ValueError")])
    fig, data = correctness_figure.correctness(rows, "m")
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["this kernel (Triton), forward: 2 of 2 cases pass",
                      "plain (contender), forward: 2 of 2 cases pass",
                      "unscaled (contender), forward: 0 of 2 cases pass — it fails every case"]
    unscaled = data[data["impl"] == "unscaled"]
    assert list(unscaled["verdict"]) == ["fail", "fail, no error to draw"]
    assert unscaled["panel"].eq(titles[2]).all()
    drawn = panel_points(fig, "unscaled")
    assert len(drawn) == 2 and (drawn[:, 1] > 1).all()  # both above the verdict's line
    assert len(panel_points(fig, "plain")) == 2 and len(panel_points(fig, "this kernel")) == 2
    assert "pass" not in fig._suptitle.get_text().split("—")[0]  # no count over everyone in the title
    plt.close(fig)


def test_correctness_figure_judges_each_implementation_by_its_own_tolerance():
    # the same error: under the contender's tolerance (its PyTorch error is larger), over the kernel's
    rows = pd.DataFrame([correctness_row("triton", False, err=3e-3, err_torch=1e-3),
                         correctness_row("mine", False, err=3e-3, err_torch=2e-3)])
    fig, data = correctness_figure.correctness(rows, "m")
    assert list(data.set_index("impl")["ratio"].round(6)) == [1.5, 0.75]
    assert panel_points(fig, "this kernel")[0, 1] > 1 > panel_points(fig, "mine")[0, 1]
    assert [ax.get_title() for ax in fig.axes] == [
        "this kernel (Triton), forward: 0 of 1 cases pass — it fails every case",
        "mine (contender), forward: 1 of 1 cases pass"]
    plt.close(fig)


def test_bytes_vs_n_marks_long_sequences_only_where_the_grid_reaches_them():
    fig, _ = plots.bytes_vs_n(cpu_bytes_table(), "m")  # N = 256 and 512 only
    assert not any("N ≥" in t.get_text() for t in fig.axes[0].texts)
    plt.close(fig)


def test_intensity_ratio_at_a_tile_the_table_lacks_says_which_it_has():
    table = symbolic.byte_table([256], [64], [(128, 64)], ["float32"])
    with pytest.raises(ValueError, match="no tile B_r = 64, B_c = 64; its tiles: \\[\\(128, 64\\)\\]"):
        plots.intensity_ratio(table, (64, 64))


@pytest.mark.skipif(not (REF / "gpu" / "bytes" / "bytes.csv").exists(), reason="no reference run")
def test_gpu_bytes_figure_draws_a_contender_as_a_measured_line_without_a_model():
    table = pd.read_csv(REF / "gpu" / "bytes" / "bytes.csv")
    mine = table[table["impl"] == "flash"].assign(impl="mine")
    mine[["model_read_bytes", "model_B_r", "model_B_c"]] = None
    fig, data = plots.gpu_bytes(pd.concat([table, mine], ignore_index=True), "H200")
    assert set(data[data["impl"] == "mine"]["kind"]) == {"measured (DRAM)"}
    assert "mine" in [t.get_text() for t in fig.legends[0].get_texts()]
    plt.close(fig)


@pytest.mark.skipif(not (REF / "gpu" / "timing" / "timing.csv").exists(), reason="no reference run")
def test_gpu_figures_from_the_reference_timing_table():
    rows = pd.read_csv(REF / "gpu" / "timing" / "timing.csv")
    t = json.loads((REF / "gpu" / "timing" / "timing.json").read_text())
    forward = contract.forward_rows(rows)  # these figures are the forward's (the backward's: backward_plots)
    fig, data = plots.tflops_vs_n(rows, t["device"])
    fa = forward[(forward["grid"] == "flashattention") & forward["ms"].notna()]
    assert len(data) == len(fa) and set(data["tflops"]) == set(fa["tflops"])
    plt.close(fig)
    fig, data = plots.lab_speedup(rows, t, t["device"])
    assert set(data["triton_speedup_over_this"]) == set(
        forward[(forward["grid"] == "lab") & (forward["impl"] == "naive")]["triton_speedup_over_this"])
    plt.close(fig)
    fig, data = plots.ratio_to_backends(rows, t["device"])
    contenders = set(forward["impl"]) - set(contract.IMPLEMENTATIONS)  # the reference's, beside the backends
    assert set(data["impl"]) == {"sdpa_cudnn", "sdpa_flash", "sdpa_efficient"} | contenders
    plt.close(fig)


def test_correctness_ylabel_fits_beside_the_axes_below_the_title():
    # the committed H200 table: 44 cases per implementation, as wide as a real run draws it
    rows = pd.read_csv(REF / "gpu" / "correctness" / "correctness.csv")
    fig, _ = correctness_figure.correctness(rows, "NVIDIA H200")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        label = ax.yaxis.label.get_window_extent(renderer)
        plot_area = ax.get_window_extent(renderer)
        title = ax.title.get_window_extent(renderer)
        # the rotated label spans no more than the plot area's height, so it neither reaches the
        # title's line nor leaves the figure at the top
        assert plot_area.y0 <= label.y0 and label.y1 <= plot_area.y1, (label, plot_area)
        assert label.y1 < title.y0
        assert label.y1 <= fig.bbox.y1
    plt.close(fig)


def test_correctness_figure_of_a_run_that_skipped_every_case_says_so():
    rows = pd.DataFrame([correctness_row("triton", c, "bfloat16", err=None, err_torch=None, skipped=True,
                                         passed=None, reason="not on this device") for c in (False, True)])
    fig, data = correctness_figure.correctness(rows, "m")
    assert [ax.get_title() for ax in fig.axes] == ["this kernel (Triton), forward: no case ran; 2 skipped"]
    assert list(data["verdict"]) == ["skipped", "skipped"] and len(panel_points(fig, "this kernel")) == 0
    plt.close(fig)


def test_correctness_figure_draws_the_gradients_in_panels_of_their_own():
    """A contender whose forward passes and whose gradients fail (its output detached): the
    gradients' panel says it fails every case, drawn at the top; one without a backward has no
    gradients panel, and its forward's title says so."""
    backward = {"direction": contract.BACKWARD}
    detached = "TypeError: its output does not require grad: autograd cannot differentiate it"
    rows = pd.DataFrame(
        [correctness_row("triton", c, direction=contract.FORWARD) for c in (False, True)]
        + [correctness_row("triton", c, err=2e-3, err_torch=2e-4, **backward) for c in (False, True)]
        + [correctness_row("nograd", c) for c in (False, True)]
        + [correctness_row("nograd", c, err=None, passed=False, reason=detached, **backward)
           for c in (False, True)]
        + [correctness_row("forward_only", c) for c in (False, True)]
        + [correctness_row("forward_only", c, err=None, err_torch=None, skipped=True, passed=None,
                           reason="forward_only has no backward", **backward) for c in (False, True)])
    fig, data = correctness_figure.correctness(rows, "m")
    assert [ax.get_title() for ax in fig.axes] == [
        "this kernel (Triton), forward: 2 of 2 cases pass",
        "this kernel (Triton), gradients (dQ, dK, dV): 0 of 2 cases pass — it fails every case",
        "nograd (contender), forward: 2 of 2 cases pass",
        "nograd (contender), gradients (dQ, dK, dV): 0 of 2 cases pass — it fails every case",
        "forward_only (contender), forward: 2 of 2 cases pass; gradients not run"]
    drawn = panel_points(fig, "nograd (contender), gradients")
    assert len(drawn) == 2 and (drawn[:, 1] > 1).all()  # no error to draw: above the line
    kernel = panel_points(fig, "this kernel (Triton), gradients")
    assert sorted(kernel[:, 1]) == [2e-3 / 1e-3] * 2  # the worst gradient's error over its tolerance
    assert set(data[data["impl"] == "nograd"]["verdict"]) == {"pass", "fail, no error to draw"}
    plt.close(fig)
