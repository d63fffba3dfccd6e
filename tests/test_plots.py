"""Each figure is drawn from the table it claims; without GPU timing the GPU figures say so."""

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from minimodel import contract, symbolic
from minimodel.report import plots

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
        expected = (symbolic.model_bytes("naive", r["N"], 64, 64, 64, 4)
                    / symbolic.model_bytes("flash", r["N"], 64, 64, 64, 4))
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


def test_correctness_figure_draws_every_case_that_ran():
    rows = pd.DataFrame([
        {"N": 64, "d": 64, "causal": c, "dtype": "float16", "skipped": False, "backend": "interpreter",
         "err_kernel_vs_fp64": e, "err_torch_vs_fp64": 2 * e, "tolerance": max(1e-3, 4 * e),
         "passed": True}
        for c, e in ((False, 1e-4), (True, 0.0))] + [
        {"N": 64, "d": 64, "causal": False, "dtype": "bfloat16", "skipped": True, "backend": "interpreter"}])
    fig, data = plots.correctness(rows, "m")
    assert len(data) == 2
    kernel = fig.axes[0].collections[0].get_offsets()[:, 1]
    assert sorted(kernel) == [plots.ERROR_FLOOR, 1e-4]  # an exact 0 is drawn at the floor
    assert "2 of 2 pass" in fig.axes[0].get_title()
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
def test_gpu_figures_from_the_reference_timing_table(reference):
    REF = reference  # in today's names (conftest.reference)
    rows = pd.read_csv(REF / "gpu" / "timing" / "timing.csv")
    t = json.loads((REF / "gpu" / "timing" / "timing.json").read_text())
    fig, data = plots.tflops_vs_n(rows, t["device"])
    fa = rows[(rows["grid"] == "flashattention") & rows["ms"].notna()]
    assert len(data) == len(fa) and set(data["tflops"]) == set(fa["tflops"])
    plt.close(fig)
    fig, data = plots.lab_speedup(rows, t, t["device"])
    assert set(data["triton_speedup_over_this"]) == set(
        rows[(rows["grid"] == "lab") & (rows["impl"] == "naive")]["triton_speedup_over_this"])
    plt.close(fig)
    fig, data = plots.ratio_to_backends(rows, t["device"])
    contenders = set(rows["impl"]) - set(contract.IMPLEMENTATIONS)  # the reference's, beside the backends
    assert set(data["impl"]) == {"sdpa_cudnn", "sdpa_flash", "sdpa_efficient"} | contenders
    plt.close(fig)


def test_correctness_ylabel_fits_beside_the_axes_below_the_title():
    # the committed H200 table: 44 cases, as wide as a real run draws it
    rows = pd.read_csv(REF / "gpu" / "correctness" / "correctness.csv")
    fig, _ = plots.correctness(rows, "NVIDIA H200")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    label = ax.yaxis.label.get_window_extent(renderer)
    plot_area = ax.get_window_extent(renderer)
    title = ax.title.get_window_extent(renderer)
    # the rotated label spans no more than the plot area's height, so it neither reaches the
    # title's line nor leaves the figure at the top
    assert plot_area.y0 <= label.y0 and label.y1 <= plot_area.y1, (label, plot_area)
    assert label.y1 < title.y0
    assert label.y1 <= fig.bbox.y1
    plt.close(fig)
