"""The backward's figures: bytes against N (model, CPU, GPU DRAM) and throughput against N."""

from pathlib import Path

import pandas as pd

from minimodel import symbolic
from minimodel.cpu import bytecount
from minimodel.floor import contract
from minimodel.floor.byte_model.backward import BACKWARD_DIRECTIONS
from minimodel.report import backward_plots


def _backward_rows(*grid):
    """Stage 1's rows of the backward alone and of forward + backward."""
    return pd.concat([symbolic.byte_table(*grid, direction=d) for d in BACKWARD_DIRECTIONS],
                     ignore_index=True)


REF = Path(__file__).resolve().parents[1] / "results" / "reference" / "nvidia-h200"


def backward_timing() -> pd.DataFrame:
    """The reference's forward timing rows, and the same points as backward rows (tflops halved)."""
    rows = contract.forward_rows(pd.read_csv(REF / contract.TIMING))
    return pd.concat([rows, rows.assign(direction=contract.BACKWARD, tflops=rows["tflops"] / 2)],
                     ignore_index=True)


def test_backward_throughput_draws_every_implementation_timed_backward_and_only_those_rows():
    rows = backward_timing()
    rows = rows[~((rows["direction"] == contract.BACKWARD) & (rows["impl"] == contract.SDPA_EFFICIENT))]
    fig, data = backward_plots.backward_tflops_vs_n(rows, "H200")
    timed = rows[(rows["direction"] == contract.BACKWARD) & (rows["grid"] == contract.FLASHATTENTION_GRID)
                 & rows["ms"].notna()]
    assert len(data) == len(timed) and set(data["tflops"]) == set(timed["tflops"])
    assert set(data["impl"]) == set(timed["impl"]) and contract.SDPA_EFFICIENT not in set(data["impl"])
    legend = {t.get_text() for t in fig.legends[0].get_texts()}
    assert {"this kernel (Triton)", "SDPA flash (FA2)", "SDPA cuDNN"} <= legend


def test_backward_throughput_without_backward_rows_says_so():
    before = contract.forward_rows(pd.read_csv(REF / contract.TIMING)).drop(columns="direction")
    for rows in (before,  # a run made before the backward: no direction column
                 backward_timing().query("direction == 'forward'")):
        fig, data = backward_plots.backward_tflops_vs_n(rows, "H200")
        assert data.empty
        assert "has no timed backward rows" in " ".join(t.get_text() for t in fig.axes[0].texts)


def test_backward_bytes_draw_the_gpu_dram_reads_beside_the_models_where_measured():
    grid = [256, 512, 1024], [64], [(64, 64)], ["float32"]
    sym = pd.concat([symbolic.byte_table(*grid), _backward_rows(*grid)], ignore_index=True)
    cpu = pd.DataFrame(bytecount.sweep([256, 512], [64], ["float32"], direction=contract.BACKWARD))
    gpu = contract.forward_rows(pd.read_csv(REF / contract.GPU_BYTES))
    backward = gpu[gpu["impl"].isin([contract.NAIVE_SCHEME, contract.FLASH_SCHEME])].assign(
        direction=contract.BACKWARD, dram_read_bytes=lambda f: f["dram_read_bytes"] * 3)
    table = pd.concat([gpu, backward], ignore_index=True)
    fig, data = backward_plots.backward_bytes_vs_n(sym, cpu, (64, 64), "float32", table)
    drawn = data[data["source"] == backward_plots.SOURCE_GPU]
    expected = backward[(backward["status"] == contract.MEASURED) & ~backward["causal"]]
    assert len(drawn) == len(expected)
    per_head = expected["dram_read_bytes"] / (expected["B"] * expected["H"])
    assert sorted(drawn["value"]) == sorted(per_head)  # the backward's rows, not the forward's
    assert len(fig.axes) == 2  # the model and CPU above, the GPU below (d = 64)
    fig, data = backward_plots.backward_bytes_vs_n(sym, cpu, (64, 64), "float32", None,
                                                   "not measured: no CUDA device")
    assert backward_plots.SOURCE_GPU not in set(data["source"]) and len(fig.axes) == 1
    assert "not measured: no CUDA device" in fig._suptitle.get_text()
    assert backward_plots.default_dtype(sym, cpu) == "float32"
