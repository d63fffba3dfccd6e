"""GPU timing: the FLOP convention, the ratios and the honest no-GPU table (GPU parts skip)."""


import pandas as pd
import pytest
import torch
from conftest import DEVICE, HAS_CUDA, snakemake_until

from minimodel import contract
from minimodel.gpu import grids, timing, timing_backward


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
    assert len(rows) == 3 * (2 * 2 + 1 * 2 * 2)  # forward, backward, fwd+bwd
    assert all(r["ms"] is None and r["status"] == contract.NO_GPU_TIMING for r in rows)
    planned = [(p.grid, p.N, p.d, p.causal) for p in grids.points(cfg)]
    for direction in ("forward", "backward", "fwd+bwd"):
        timed = [(r["grid"], r["N"], r["d"], r["causal"]) for r in rows if r["direction"] == direction]
        assert timed == planned
    assert [r["direction"] for r in rows[:len(planned)]] == ["forward"] * len(planned)  # the forward's first
    forward_only = timing.no_gpu_rows({**cfg, "backward": False})
    assert forward_only == rows[:len(planned)]


def test_ratios_are_taken_within_a_direction():
    point = {"grid": "lab", "B": 1, "H": 1, "N": 64, "d": 64, "causal": False}
    rows = [{**point, "impl": i, "ms": ms, "direction": dr}
            for dr, impls in (("forward", (("triton", 1.0), ("naive", 4.0))),
                              ("backward", (("triton", 2.0), ("naive", 4.0))), ("fwd+bwd", (("naive", 9.0),)))
            for i, ms in impls]
    timing.add_ratios(rows)
    by = {(r["direction"], r["impl"]): r["triton_speedup_over_this"] for r in rows}
    assert by[("forward", "naive")] == 4.0 and by[("backward", "naive")] == 2.0
    assert by[("fwd+bwd", "naive")] is None  # no kernel row in that direction


def test_backward_flops_follow_flashattentions_convention():
    assert timing_backward.symbolic_backward.attention_flops(2, 4, 1024, 64, False, "backward") == (
        2.5 * timing.attention_flops(2, 4, 1024, 64, False))
    assert timing_backward.symbolic_backward.attention_flops(2, 4, 1024, 64, True, "fwd+bwd") == (
        3.5 * timing.attention_flops(2, 4, 1024, 64, True))


@pytest.mark.parametrize("direction", ["backward", "fwd+bwd"])
@pytest.mark.parametrize("name", ["triton", "naive"])
def test_the_timed_backward_calls_pass_the_one_head_check(gen, name, direction):
    """What the timing stage times in each backward direction, checked as it checks it (on the CPU
    under the interpreter here), and a wrong gradient fails that check."""
    q, k, v, do = (torch.randn(1, 2, 70, 64, generator=gen).half().to(DEVICE) for _ in range(4))
    fn = timing_backward.implementations(True)[name]
    call = timing_backward.make_call(name, fn, q, k, v, do, True, direction)
    exact, lowp = timing_backward.one_head_grads(q, k, v, do, True)
    got = call()
    assert [g.shape for g in got] == [q.shape, k.shape, v.shape]
    result = {"heads": tuple(g[:1, :1] for g in got), "has_nan": False}
    row = timing_backward.check({"status": "ok"}, result, exact, lowp)
    assert row["checked"] and row["status"] == "ok" and 0 < row["err_vs_fp64"] < 1e-2
    result["heads"] = (result["heads"][0] * 1.02, *result["heads"][1:])
    row = timing_backward.check({"status": "ok"}, result, exact, lowp)
    assert not row["checked"] and row["status"] == "failed its correctness check"


def test_a_contender_without_a_backward_is_a_skipped_backward_row():
    from minimodel.contenders import parse

    class NotCalled:
        contender = parse("fwd_only", {"fn": "m:f"})

        def call(self, *args):
            raise AssertionError("a contender without a backward was run")

    row = {"grid": "lab", "B": 2, "H": 4, "N": 64, "d": 64, "causal": False, "impl": "fwd_only",
           "direction": "backward"}
    out = timing_backward.time_contender(NotCalled(), row, None, None, 0, 1, 1)
    assert out["status"] == "skipped: fwd_only has no backward (backward: true in its entry gives it one)"


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


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_backward_time_point_checks_and_times_every_implementation_and_a_contender():
    """One backward point per implementation always timed, and a contender with a backward in its
    child process (FlexAttention's, compiled), in both backward directions."""
    from minimodel.contenders import registry
    from minimodel.contenders.builtin import BUILTINS
    from minimodel.contenders.run import Child

    ceilings = {"peak_flops_per_s": 1e15}
    with (Child(BUILTINS["flex"], registry.SEARCH) as child,
          Child(BUILTINS["triton_tl"], registry.SEARCH) as tl):
        rows = timing_backward.time_point("lab", 1, 2, 256, 64, True,
                                          ["triton", "naive", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn"],
                                          5, 20, ceilings, random_seed=0, contenders=[child, tl])
    assert [r["direction"] for r in rows] == ["backward"] * 7 + ["fwd+bwd"] * 7
    for r in rows:
        if r["impl"] == "triton_tl":
            assert r["status"].startswith("skipped: triton_tl has no backward")
            continue
        assert r["status"] == "ok" and r["checked"] and r["ms"] > 0 and r["eager_ms"] > 0, r
        assert r["timing"] == "cuda_graph", r
        assert r["tflops"] > 0


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


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", ["flash_attn", "fa4"])
def test_flashattentions_backward_is_timed_in_its_child(name):
    """FlashAttention-2's and -4's backward through autograd, one point on FlashAttention's grid
    (skipped rows saying why where the package is missing)."""
    from minimodel.contenders import registry
    from minimodel.contenders.builtin import BUILTINS, unavailable
    from minimodel.contenders.run import Child

    with Child(BUILTINS[name], registry.SEARCH) as child:
        rows = timing_backward.time_point("flashattention", 4, 16, 4096, 128, True, ["triton"], 5, 20,
                                          {"peak_flops_per_s": 1e15}, random_seed=0, contenders=[child])
    theirs = [r for r in rows if r["impl"] == name]
    assert [r["direction"] for r in theirs] == ["backward", "fwd+bwd"]
    if unavailable(name):
        assert all(r["status"] == f"skipped: {unavailable(name)}" for r in theirs)
        pytest.skip(unavailable(name))
    for r in rows:
        assert r["status"] == "ok" and r["checked"] and r["ms"] > 0 and r["timing"] == "cuda_graph", r
    timing.add_ratios(rows)
    assert all(r["triton_speedup_over_this"] > 0 for r in theirs)
