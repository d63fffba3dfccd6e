"""GPU timing: the FLOP convention, the ratios and the honest no-GPU table (GPU parts skip)."""


import pandas as pd
import pytest
import torch
from conftest import HAS_CUDA, snakemake_until

from minimodel import contract
from minimodel.gpu import grids, timing


def test_attention_flops_halves_for_causal():
    assert timing.attention_flops(2, 4, 1024, 64, False) == 4 * 2 * 4 * 1024**2 * 64
    assert timing.attention_flops(2, 4, 1024, 64, True) == 2 * 2 * 4 * 1024**2 * 64


def test_ratios_are_relative_to_the_kernel_per_point():
    rows = [{"grid": "lab", "B": 1, "H": 1, "N": 64, "d": 64, "causal": c, "impl": i, "ms": ms}
            for c in (False, True) for i, ms in (("triton", 1.0 + c), ("naive", 5.0), ("sdpa_cudnn", None))]
    timing.add_ratios(rows)
    by = {(r["causal"], r["impl"]): r["triton_speedup_over_this"] for r in rows}
    assert by[(False, "naive")] == 5.0 and by[(True, "naive")] == 2.5
    assert by[(False, "triton")] == 1.0 and by[(False, "sdpa_cudnn")] is None


def test_no_gpu_rows_cover_the_plan_and_carry_no_numbers():
    cfg = {**grids.default_timing_config(), "lab_n": [64, 256], "fa_n": [1024],
           "fa_head_dims": [64, 128]}
    rows = timing.no_gpu_rows(cfg)
    assert len(rows) == 2 * 2 + 1 * 2 * 2
    assert all(r["ms"] is None and r["status"] == contract.NO_GPU_TIMING for r in rows)
    planned = [(p.grid, p.N, p.d, p.causal) for p in grids.points(cfg)]
    assert [(r["grid"], r["N"], r["d"], r["causal"]) for r in rows] == planned


def test_the_grids_follow_the_config():
    cfg = grids.default_timing_config()
    fa = grids.flashattention_grid(cfg)
    assert {p.B * p.N for p in fa} == {cfg["fa_tokens"]}
    assert {p.H * p.d for p in fa} == {cfg["fa_model_dim"]}
    lab = grids.lab_grid(cfg)
    assert {(p.B, p.H, p.d) for p in lab} == {(cfg["lab_batch"], cfg["lab_heads"],
                                               cfg["lab_head_dim"])}
    assert len(lab) == 2 * len(cfg["lab_n"]) and len(fa) == 2 * len(cfg["fa_n"]) * len(cfg["fa_head_dims"])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_time_point_checks_and_times_every_implementation():
    ceilings = {"peak_flops_per_s": 1e15}
    rows = timing.time_point("lab", 1, 2, 256, 64, True, ["triton", "naive", "sdpa_flash"],
                             5, 20, ceilings, random_seed=0)
    for r in rows:
        assert r["status"] == "ok" and r["checked"] and r["ms"] > 0 and r["eager_ms"] > 0
        assert r["timing"] == "cuda_graph"


@pytest.mark.workflow
@pytest.mark.skipif(HAS_CUDA, reason="a CUDA device times the points")
def test_without_cuda_gpu_timing_says_so_on_the_console(tmp_path):
    root, proc = snakemake_until(tmp_path, "gpu_timing")
    table = pd.read_csv(root / "results" / "gpu" / "timing" / "timing.csv")
    assert table["status"].eq(contract.NO_GPU_TIMING).all() and table["ms"].isna().all()
    line = (f"gpu_timing: no CUDA device; results/gpu/timing/timing.csv lists the {len(table)} "
            "planned points as not run")
    assert line in proc.stderr  # on the terminal, where the rule ran
    assert line in (root / "results" / "logs" / "gpu_timing.log").read_text()
