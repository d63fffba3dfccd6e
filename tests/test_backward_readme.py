"""The results README's Backward section: the recomputation's trade on the run's roofline, and the
backward's timing where the run has it, every number from the tables."""

import json
from pathlib import Path

import pandas as pd
import pytest

from minimodel import symbolic
from minimodel.floor import contract
from minimodel.gpu import grids
from minimodel.report import backward_answers, results_readme

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "results" / "reference" / "nvidia-h200"
TEMPLATE = ROOT / "workflow" / "report" / "README.md.j2"


def ref_paths(**override):
    return {"symbolic": REF / contract.SYMBOLIC_BYTES, "cpu_bytes": REF / contract.CPU_BYTES,
            "cpu_ceilings": REF / contract.CPU_CEILINGS, "correctness": REF / contract.CORRECTNESS_SUMMARY,
            "timing": REF / contract.TIMING_SUMMARY, "timing_table": REF / contract.TIMING,
            "gpu_bytes": REF / contract.GPU_BYTES, "gpu_bytes_summary": REF / contract.GPU_BYTES_SUMMARY,
            "benchmarks": sorted((REF / contract.BENCHMARKS).glob("cpu_*.tsv")), **override}


@pytest.fixture
def symbolic_table(tmp_path) -> Path:
    """Today's symbolic table (forward and backward rows) on a small grid, as the symbolic rule writes it."""
    grid = [256, 1024, 4096, 16384], [64, 128], [(64, 64), (128, 128)], ["float16", "float32"]
    path = tmp_path / "symbolic.csv"
    symbolic.tidy_table(*grid).to_csv(path, index=False)
    return path


def test_without_a_gpu_the_trade_is_on_the_cpus_roofline_and_the_timing_says_not_measured(
        symbolic_table, tmp_path):
    no_gpu = tmp_path / "timing.json"
    no_gpu.write_text(json.dumps({"device": None, "status": contract.NO_GPU_TIMING}))
    table = tmp_path / "timing.csv"
    cfg = {**grids.default_timing_config(), "lab_n": [64], "fa_n": [1024], "fa_head_dims": [64]}
    pd.DataFrame(grids.no_gpu_timing_rows(cfg)).to_csv(table, index=False)
    numbers = results_readme.collect(ref_paths(symbolic=symbolic_table, timing=no_gpu, timing_table=table))
    text = results_readme.render(TEMPLATE, numbers)
    section = text[text.index("## Backward"):text.index("## Theory 02")]
    ceilings = json.loads((REF / contract.CPU_CEILINGS).read_text())
    trade = numbers["backward"]["trade"]
    assert trade["where"] == ceilings["device"] and trade["dtype"] == "float32"
    assert f"{ceilings['bandwidth_bytes_per_s'] / 1e9:,.1f} GB/s" in section
    rows = pd.read_csv(symbolic_table)
    both = rows[(rows["direction"] == contract.FWD_BWD) & (rows["dtype"] == "float32") & (rows["N"] == 16384)
                & (rows["d"] == 64) & (rows["B_r"] == 64)]
    naive = float(both.loc[both["scheme"] == "naive", "bytes"].iloc[0])
    flash = float(both.loc[both["dq_accumulation"] == contract.DQ_SEPARATE_PASS, "bytes"].iloc[0])
    extra = 3 * 2 * 16384**2 * 64  # seven matmuls against four
    saved_ms = (naive - flash) / ceilings["bandwidth_bytes_per_s"] * 1e3
    extra_ms = extra / ceilings["peak_flops_per_s"] * 1e3
    line = next(x for x in section.splitlines() if x.startswith("| 64 | 64 × 64 |"))
    mib = [f"{x / 2**20:,.1f} MiB" for x in (naive, flash, naive - flash)]
    assert "| " + " | ".join(mib) + " |" in line
    assert f"| {extra:.2e} | {saved_ms:.3g} ms | {extra_ms:.3g} ms |" in line
    assert "not measured: " + contract.NO_GPU_TIMING in section


def test_the_recomputation_pays_from_the_first_n_after_which_the_saved_bytes_time_exceeds():
    grid = [64, 256, 1024, 4096], [64], [(64, 64)], ["float16"]
    rows = symbolic.tidy_table(*grid)
    fast_memory = {"peak_flops_per_s": 1e12, "bandwidth_bytes_per_s": 1e15}  # bytes are nearly free
    never = backward_answers.recompute_trade(rows, fast_memory, "float16", "x")["per_d"][0]
    assert never["pays_from_n"] is None
    slow_memory = {"peak_flops_per_s": 1e15, "bandwidth_bytes_per_s": 1e9}
    r = backward_answers.recompute_trade(rows, slow_memory, "float16", "x")["per_d"][0]
    assert r["pays_from_n"] == 64 and r["saved_over_extra_time"] > 1
    old = rows[rows["direction"] == contract.FORWARD].drop(columns=["direction", "dq_accumulation"])
    assert not backward_answers.recompute_trade(old, slow_memory, "float16", "x")["available"]
    no_flash = rows[~((rows["direction"] == contract.FWD_BWD) & (rows["scheme"] == "flash"))]
    assert "no forward + backward rows" in backward_answers.recompute_trade(no_flash, slow_memory, "float16",
                                                                            "x")["why"]


def test_the_backward_timing_is_the_tables_geometric_means(symbolic_table, tmp_path):
    """Synthetic backward rows: the reference's forward timings as the backward's, SDPA flash's
    1.3 × slower at every point and cuDNN's 0.8 ×, no FA4 row."""
    rows = contract.forward_rows(pd.read_csv(REF / contract.TIMING, float_precision="round_trip"))
    point = ["grid", "B", "H", "N", "d", "causal"]
    kernel_ms = rows[rows["impl"] == contract.TRITON][[*point, "ms"]].rename(columns={"ms": "kernel_ms"})
    backward = rows[rows["impl"].isin([contract.TRITON, contract.SDPA_FLASH, contract.SDPA_CUDNN])].merge(
        kernel_ms, on=point)
    factor = backward["impl"].map({contract.TRITON: 1.0, contract.SDPA_FLASH: 1.3, contract.SDPA_CUDNN: 0.8})
    backward = backward.assign(direction=contract.BACKWARD, ms=backward["kernel_ms"] * factor).drop(
        columns="kernel_ms")
    table = tmp_path / "timing.csv"
    pd.concat([rows.assign(direction=contract.FORWARD), backward]).to_csv(table, index=False)
    numbers = results_readme.collect(ref_paths(symbolic=symbolic_table, timing_table=table))
    text = results_readme.render(TEMPLATE, numbers)
    section = text[text.index("## Backward"):text.index("## Theory 02")]
    fa = backward[(backward["grid"] == contract.FLASHATTENTION_GRID) & (backward["status"] == contract.OK)]
    kernel = fa[fa["impl"] == contract.TRITON]
    points = len(kernel)
    assert f"{kernel['tflops'].min():,.1f}–{kernel['tflops'].max():,.1f} TFLOP/s" in section
    assert f"- sdpa_flash: 1.30× over {points} points" in section
    assert f"- sdpa_cudnn: 0.80× over {points} points" in section
    assert "- fa4: not timed in this run" in section
    # the forward's answers read the forward's rows only: as without the backward rows
    forward_only = tmp_path / "forward_timing.csv"
    rows.to_csv(forward_only, index=False)
    plain = results_readme.collect(ref_paths(symbolic=symbolic_table, timing_table=forward_only))
    assert numbers["gpu"] == plain["gpu"] and numbers["contenders"] == plain["contenders"]
    assert plain["backward"]["timing"]["why"].startswith("this run timed no backward")
    # and as with the reference's own backward and forward + backward rows
    reference = results_readme.collect(ref_paths(symbolic=symbolic_table))
    assert reference["gpu"] == plain["gpu"] and reference["contenders"] == plain["contenders"]
