"""Decode's stage 3 and its figures: without a GPU, the kernel checked under the interpreter and every
timed row saying why not; with one, every implementation checked and timed (a GPU test)."""

from types import SimpleNamespace

import jinja2
import pandas as pd
import pytest
from conftest import HAS_CUDA, requires_gpu

from minimodel.floor import contract, decode_grid
from minimodel.floor.provenance import configcheck, project
from minimodel.gpu import decode
from minimodel.report import decode_plots

GRID = {"len_q": [1, 4], "kv_len": [1024], "batch": [2], "heads": [[32, 8]], "head_dims": [128],
        "dtypes": ["bfloat16"], "ragged": [False, True], "samples": 3, "rotate_l2_multiple": 4,
        "leave_out": [],
        "interpreter": {"len_q": [1, 4], "kv_len": [77], "batch": [2], "heads": [[4, 2]], "head_dims": [64],
                        "dtypes": ["float16"], "ragged": [True]}}


def test_without_a_gpu_every_timed_row_says_so():
    rows = pd.DataFrame(decode.no_gpu_rows(GRID, 16 * 10**9))
    assert len(rows) == 4 * 8  # points × the kernel, at one split too, naive and five contenders
    assert (rows["status"] == contract.NO_GPU_TIMING).all()
    assert list(rows["impl"][:3]) == [contract.TRITON, contract.TRITON_ONE_SPLIT, contract.NAIVE]
    point = decode_grid.DecodePoint(2, 1, 32, 8, 128, 1024, False, "bfloat16")
    assert rows["least_bytes"].iloc[0] == decode.least_bytes(point) == (2 * 2 * 1024 * 8 * 128
                                                                        + 2 * 2 * 32 * 128) * 2


@pytest.mark.skipif(HAS_CUDA, reason="the interpreter's path")
def test_the_kernel_is_checked_under_the_interpreter():
    rows = decode.interpreter_rows(GRID, 16 * 10**9, 0)
    assert len(rows) == 2 and all(r["passed"] and r["backend"] == decode.INTERPRETER for r in rows)
    assert decode.kernel_passed(rows)
    assert not decode.kernel_passed([*rows, {**rows[0], "passed": False}])


def test_the_figures_draw_the_model_and_say_when_nothing_was_timed(tmp_path):
    table = pd.DataFrame([{**decode_grid.DecodePoint(b, 1, 32, 8, 128, n, False, "float16").row(),
                           "scheme": scheme, "splits": splits, "bytes": 10.0 * n * b,
                           "kv_cache_bytes": 8.0 * n * b, "bound_us": n * b / 1e3}
                          for b in (1, 4) for n in (1024, 4096)
                          for scheme, splits in ((contract.NAIVE_SCHEME, 1), (contract.SPLIT_KV_SCHEME, 1),
                                                 (contract.SPLIT_KV_SCHEME, 8))])
    _, plotted = decode_plots.decode_bytes(table, 4.8e12)
    assert set(plotted["panel"]) == {"bytes", "bound"}
    assert (plotted[plotted["panel"] == "bytes"]["over_cache"] == 1.25).all()
    assert len(plotted[plotted["panel"] == "bound"]) == 4  # two batches × two lengths, one split
    rows = pd.DataFrame(decode.no_gpu_rows(GRID, 16 * 10**9))
    fig, drawn = decode_plots.decode_bandwidth(rows, {"status": contract.NO_GPU_TIMING})
    assert len(drawn) == 0 and contract.NO_GPU_TIMING in fig.axes[0].texts[0].get_text()
    timed = rows.assign(status=contract.OK, gb_per_s=1000.0)
    _, drawn = decode_plots.decode_bandwidth(timed, {"bandwidth_bytes_per_s": 4e12, "device": "H"})
    assert len(drawn) == 8 and set(drawn["L_q"]) == {1}  # uniform lengths, the first query length
    # a read-only stream above the copy bandwidth stays inside the axes; the interpreter's rows (ok, no
    # GB/s) are not drawn
    timed.loc[timed["impl"] == contract.TRITON, "gb_per_s"] = 5000.0
    checked = rows[rows["impl"] == contract.TRITON].assign(backend=decode.INTERPRETER, status=contract.OK)
    fig, drawn = decode_plots.decode_bandwidth(pd.concat([checked, timed]),
                                               {"bandwidth_bytes_per_s": 4e12, "device": "H"})
    assert len(drawn) == 8 and all(ax.get_ylim()[1] > 5000 for ax in fig.axes)


@pytest.mark.parametrize("leave_out", [[], ["flex", "fa4"]])
def test_the_report_captions_render_on_the_config(leave_out):
    """Each decode caption renders as Snakemake's report renders it, on the config's keys (a key the
    config lacks is an error here); the stage 3 ones name what `decode.gpu.leave_out` leaves out."""
    config = configcheck.load_config()
    config["decode"]["gpu"]["leave_out"] = leave_out
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    folder = project.root() / "workflow" / "report"
    for name in (*contract.DECODE_FIGURES, "table_decode_gpu", "table_decode_symbolic", "table_decode_cpu"):
        text = env.from_string((folder / f"{name}.rst").read_text()).render(
            snakemake=SimpleNamespace(config=config))
        assert "{" not in text, name
        if name in ("decode_bandwidth", "table_decode_gpu"):
            named = ", but flex, fa4 (decode.gpu.leave_out)" in " ".join(text.split())
            assert named == bool(leave_out), name


@requires_gpu
def test_every_implementation_is_checked_and_timed_on_the_gpu():
    timing = {"sample_ms": 5, "sample_warmup_ms": 5}
    rows, samples, summary = decode.run(GRID, 16 * 10**9, 3e12, timing, 0)
    table = pd.DataFrame(rows)
    print(table[["L_q", "ragged", "impl", "status", "err_vs_fp64", "ms", "gb_per_s", "cache_copies"]])
    assert summary["kernel_passed"] and summary["device_l2_bytes"] > 0
    kernel = table[table["impl"] == contract.TRITON]
    assert (kernel["status"] == contract.OK).all() and (kernel["gb_per_s"] > 0).all()
    # the caches (4 MiB at this point) rotated past 4× the L2
    assert (kernel["cache_copies"] * 2 * 2 * 1024 * 8 * 128 * 2 >= 4 * summary["device_l2_bytes"]).all()
    assert len(samples) == 3 * (table["status"] == contract.OK).sum()
