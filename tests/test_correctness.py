import tempfile
from pathlib import Path

import pandas as pd
import pytest
import yaml

from minimodel.floor import contract
from minimodel.floor.correctness_rule import tolerance
from minimodel.gpu import correctness, kernel_check
from minimodel.gpu.implementations import Local
from minimodel.kernel import BF16_INTERPRETER_REASON

CFG = yaml.safe_load(open("config/config.yaml"))["gpu"]["correctness"]


def kernel_rows(cfg, backend, random_seed, *directions):
    """The kernel's rows of the sweep in `directions` (the forward's alone by default)."""
    planned = correctness.plan(cfg, backend, random_seed)
    chosen = {d: planned[d] for d in directions or [contract.FORWARD]}
    return correctness.rows_of(Local(contract.TRITON), chosen, random_seed)


def test_tolerance_rule():
    assert tolerance(1e-4) == 1e-3
    assert tolerance(1.5e-3) == 3e-3


def test_interpreter_grid_is_small_and_skips_bf16_with_its_reason():
    cases = correctness.sweep_cases(CFG, "interpreter")
    ran = [c for c in cases if "skip" not in c]
    assert ran and all(c["N"] <= CFG["interpreter"]["max_n"] for c in cases)
    assert all(c["B"] == 1 and c["H"] == 2 for c in cases)
    bf16 = [c for c in cases if c["dtype"] == "bfloat16"]
    assert bf16 and all(c["skip"] == BF16_INTERPRETER_REASON for c in bf16)
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
    rows = kernel_rows(tiny_cfg(), backend, 1234)
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
    real = kernel_check.flash_attn_forward
    monkeypatch.setattr(kernel_check, "flash_attn_forward",
                        lambda q, k, v, causal: real(q, k, v, causal=not causal))
    backend = correctness.select_backend()
    rows = kernel_rows(tiny_cfg(), backend, 1)
    summary = correctness.summarize(rows, backend, 1)
    assert not summary["all_passed"] and summary["failed"] >= 2


@pytest.mark.parametrize("err_torch, err_kernel, passed", [(1.5e-3, 2.9e-3, True), (1e-4, 1.1e-3, False)])
def test_verdict_follows_the_rule(err_torch, err_kernel, passed):
    assert (err_kernel <= tolerance(err_torch)) is passed


# ---- the backward's rows (direction: backward) -------------------------------------------------

def fixture_cfg():
    """The sweep tests/data/correctness_forward_tiny.csv was written with (interpreter)."""
    return {**tiny_cfg(), "gqa_kv_heads": 1}


@pytest.mark.skipif(correctness.select_backend() != "interpreter",
                    reason="the table was written by the interpreter")
def test_forward_rows_are_those_the_code_wrote_before_the_backward():
    from minimodel.contenders import registry

    rows = correctness.run(fixture_cfg(), "interpreter", 1234, [registry.BUILTINS["naive"]])
    table = pd.DataFrame(rows).assign(backend="interpreter")
    before = pd.read_csv(Path(__file__).parent / "data" / "correctness_forward_tiny.csv")
    assert set(table["direction"]) == {contract.FORWARD, contract.BACKWARD}
    # written and read back as the workflow does, the forward's rows are the same rows, in the same
    # order, with the same values; the new columns are beside the old ones
    with tempfile.TemporaryDirectory() as tmp:
        table.to_csv(Path(tmp) / "t.csv", index=False)
        after = pd.read_csv(Path(tmp) / "t.csv")
    forward = contract.forward_rows(after).reset_index(drop=True)
    assert "direction" not in before.columns and set(before.columns) < set(after.columns)
    pd.testing.assert_frame_equal(forward[before.columns], before, check_dtype=False)
    backward = after[after["direction"] == contract.BACKWARD]
    assert list(backward["impl"].unique()) == ["triton", "naive"]


def test_backward_rows_pass_for_the_kernel_with_per_gradient_errors():
    backend = correctness.select_backend()
    cfg = tiny_cfg()
    rows = kernel_rows(cfg, backend, 7, contract.BACKWARD)
    ran = [r for r in rows if not r["skipped"]]
    assert len(ran) == 8 * (2 if backend == "cuda" else 1)
    assert all(r["direction"] == "backward" and r["impl"] == "triton" for r in rows)
    for r in ran:
        assert r["passed"], r
        for g in ("dq", "dk", "dv"):
            assert 0 < r[f"err_{g}_kernel_vs_fp64"] <= r[f"tolerance_{g}"]
    if backend == "interpreter":
        bf16 = [r for r in rows if r["dtype"] == "bfloat16"]
        assert bf16 and all(r["skipped"] and r["reason"] == BF16_INTERPRETER_REASON for r in bf16)
    summary = correctness.summarize(kernel_rows(cfg, backend, 7) + rows, backend, 7)
    assert summary["all_passed"] and summary["cases"] == len(rows)  # the forward's verdict, its rows
    assert summary["backward"]["all_passed"] and summary["backward"]["ran"] == len(ran)


def test_a_wrong_backward_fails_the_backward_rows_only(monkeypatch):
    real = kernel_check.flash_attn_backward
    monkeypatch.setattr(kernel_check, "flash_attn_backward",
                        lambda q, k, v, o, lse, do, *a: real(q, k, v, o, lse, 1.01 * do, *a))
    backend = correctness.select_backend()
    rows = kernel_rows(tiny_cfg(), backend, 3, contract.FORWARD, contract.BACKWARD)
    summary = correctness.summarize(rows, backend, 3)
    assert summary["all_passed"] and summary["backward"]["all_passed"] is False
    assert summary["backward"]["failed"] == summary["backward"]["ran"]


def test_the_backward_cases_follow_the_config():
    cases = correctness.backward_cases(CFG, "interpreter")
    planned = correctness.sweep_cases(CFG, "interpreter")
    assert cases and all(c["N"] <= CFG["interpreter"]["backward_max_n"] for c in cases)
    assert all({k: v for k, v in c.items() if k != "index"} == planned[c["index"]] for c in cases)
    assert len(correctness.backward_cases(CFG, "cuda")) == len(correctness.sweep_cases(CFG, "cuda"))
    assert correctness.backward_cases({**CFG, "backward": False}, "cuda") == []
    backend = correctness.select_backend()
    assert correctness.summarize(kernel_rows({**tiny_cfg(), "dtypes": ["float16"]}, backend, 1), backend,
                                 1)["backward"] is None


@pytest.mark.gpu
@pytest.mark.skipif(correctness.select_backend() != "cuda", reason="needs a CUDA device")
@pytest.mark.parametrize("name", ["naive", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "flex", "flash_attn",
                                  "fa4", "triton"])
def test_the_builtins_backward_rows_pass_on_the_gpu(name):
    """Each built-in with a backward, through its child process: fp16 and bf16, a ragged N, causal
    and not (a built-in missing on this machine gives skipped rows saying why)."""
    from minimodel.contenders import catalog, registry
    from minimodel.contenders.run import Case, Child
    from minimodel.gpu.implementations import Remote

    contender = catalog.BUILTINS[name]
    cases = [Case(2, 4, 4, 1000, 128, causal, dtype, "cuda", seed=i)
             for i, (causal, dtype) in enumerate([(False, "float16"), (True, "float16"), (True, "bfloat16")])]
    planned = {contract.BACKWARD: [correctness.Planned(c) for c in cases]}
    rows = correctness.rows_of(Remote(Child(contender, registry.SEARCH)), planned)
    if catalog.unavailable(name):
        assert all(r["skipped"] and r["reason"] == catalog.unavailable(name) for r in rows)
        pytest.skip(catalog.unavailable(name))
    assert all(r["passed"] and r["direction"] == "backward" for r in rows), rows
