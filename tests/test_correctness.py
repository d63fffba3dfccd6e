import pytest
import yaml

from minimodel.gpu import correctness
from minimodel.kernel import flash

CFG = yaml.safe_load(open("config/config.yaml"))["gpu"]["correctness"]


def test_tolerance_rule():
    assert correctness.tolerance(1e-4) == 1e-3
    assert correctness.tolerance(1.5e-3) == 3e-3


def test_interpreter_grid_is_small_and_skips_bf16_with_its_reason():
    cases = correctness.sweep_cases(CFG, "interpreter")
    ran = [c for c in cases if "skip" not in c]
    assert ran and all(c["N"] <= CFG["interpreter"]["max_n"] for c in cases)
    assert all(c["B"] == 1 and c["H"] == 2 for c in cases)
    bf16 = [c for c in cases if c["dtype"] == "bfloat16"]
    assert bf16 and all(c["skip"] == flash.BF16_INTERPRETER_REASON for c in bf16)
    assert {c["group"] for c in ran} == {"lab grid", "awkward N", "head dim", "grouped heads"}


def test_grouped_cases_come_last_with_fewer_kv_heads():
    cases = correctness.sweep_cases(CFG, "cuda")
    grouped = [c for c in cases if c["group"] == "grouped heads"]
    assert grouped and cases[-len(grouped):] == grouped  # the other cases keep their inputs
    assert all(c["H_kv"] == CFG["gqa_kv_heads"] < c["H"] for c in grouped)
    assert all(c["H_kv"] == c["H"] for c in cases[:-len(grouped)])
    assert {c["N"] for c in grouped} == set(CFG["gqa_n"])
    assert correctness.sweep_cases({**CFG, "gqa_n": []}, "cuda")[-1]["group"] != "grouped heads"


def test_kv_heads_that_do_not_divide_the_heads_are_refused():
    with pytest.raises(ValueError, match="gqa_kv_heads is 3.*divisor of 4"):
        correctness.sweep_cases({**CFG, "gqa_kv_heads": 3}, "cuda")


def test_gpu_grid_is_the_lab_grid():
    cases = correctness.sweep_cases(CFG, "cuda")
    lab = {(c["N"], c["causal"]) for c in cases if c["group"] == "lab grid"}
    assert lab == {(n, causal) for n in (64, 256, 1024, 4096) for causal in (False, True)}
    assert all("skip" not in c for c in cases) and all(c["B"] == 2 and c["H"] == 4 for c in cases)


def tiny_cfg():
    return {**CFG, "n": [64], "awkward_n": [33], "other_head_dims": [16], "other_head_dims_n": 20,
            "gqa_n": [20], "interpreter": {**CFG["interpreter"], "max_n": 64}}


def test_sweep_passes_and_summary_reports_both_errors():
    backend = "cuda" if correctness.select_backend() == "cuda" else "interpreter"
    rows = correctness.run_sweep(tiny_cfg(), backend, random_seed=1234)
    summary = correctness.summarize(rows, backend, 1234)
    assert summary["all_passed"], rows
    ran = [r for r in rows if not r["skipped"]]
    # 4 shapes (one grouped) x causal or not, per dtype that runs (bf16 only on a GPU)
    assert len(ran) == 8 * (2 if backend == "cuda" else 1)
    assert any(r["H_kv"] < r["H"] for r in ran)
    for r in ran:
        assert r["err_kernel_vs_fp64"] <= r["tolerance"]
        assert r["err_torch_vs_fp64"] > 0  # PyTorch fp16 is not exact either


def test_a_wrong_kernel_fails_the_sweep(monkeypatch):
    real = correctness.flash_attn_forward
    monkeypatch.setattr(correctness, "flash_attn_forward",
                        lambda q, k, v, causal: real(q, k, v, causal=not causal))
    backend = correctness.select_backend()
    rows = correctness.run_sweep(tiny_cfg(), backend, random_seed=1)
    summary = correctness.summarize(rows, backend, 1)
    assert not summary["all_passed"] and summary["failed"] >= 2


@pytest.mark.parametrize("err_torch, err_kernel, passed", [(1.5e-3, 2.9e-3, True), (1e-4, 1.1e-3, False)])
def test_verdict_follows_the_rule(err_torch, err_kernel, passed):
    assert (err_kernel <= correctness.tolerance(err_torch)) is passed
