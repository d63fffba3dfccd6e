"""The Triton kernel: on a CUDA device when there is one, else under Triton's CPU interpreter.

The accuracy rule of tests/ and of the workflow's sweep: against a float64 reference,
err_kernel <= max(1e-3, 2 × err_torch), where err_torch is PyTorch's own low-precision
attention's error on the same inputs (see minimodel.floor.correctness_rule).
"""

import pytest
import torch
from conftest import DEVICE, HAS_CUDA, requires_gpu

from minimodel.floor.attention_ref import reference_attn
from minimodel.floor.correctness_rule import tolerance
from minimodel.gpu import kernel_check
from minimodel.kernel import (
    BF16_INTERPRETER_REASON,
    SUPPORTED_HEAD_DIMS,
    FwdConfig,
    flash,
    flash_attn_forward,
    get_fwd_config,
    gluon_config,
    hopper,
    inputs,
    launch,
    launch_config,
    portable_config,
    tl_config,
)
from minimodel.kernel.launch import MAX_PROGRAMS, grid

BF16_SKIP = pytest.mark.skipif(not HAS_CUDA, reason=BF16_INTERPRETER_REASON)


def check(B, H, N, d, causal, dtype="float16", gen=None, **kw):
    row = kernel_check.check_case(B, H, N, d, causal, dtype, device=DEVICE, generator=gen, **kw)
    print(f"B={B} H={H} N={N} d={d} causal={causal} {dtype}: kernel {row['err_kernel_vs_fp64']:.2e}"
          f" torch {row['err_torch_vs_fp64']:.2e} tolerance {row['tolerance']:.2e}")
    assert not row["has_nan"]
    assert row["passed"], row
    return row


@pytest.mark.parametrize("n", [1, 16, 64, 77, 130, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_float64_reference_for_any_n(gen, n, causal):
    check(1, 2, n, 64, causal, gen=gen)


@pytest.mark.parametrize("d", SUPPORTED_HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True])
def test_every_head_dim(gen, d, causal):
    check(1, 1, 97, d, causal, gen=gen)


@pytest.mark.parametrize("causal", [False, True])
def test_transposed_bnhd_layout_is_read_through_its_strides(gen, causal):
    check(2, 3, 70, 32, causal, gen=gen, layout="bnhd")


@pytest.mark.parametrize("h_kv", [1, 2])
@pytest.mark.parametrize("causal", [False, True])
def test_grouped_and_multi_query_heads(gen, h_kv, causal):
    check(1, 4, 65, 32, causal, gen=gen, H_kv=h_kv)


@BF16_SKIP
@pytest.mark.parametrize("causal", [False, True])
def test_bfloat16(gen, causal):
    check(2, 2, 300, 64, causal, "bfloat16", gen=gen)


def test_lse_is_the_log_sum_exp_of_each_row(gen):
    q, k, v = (torch.randn(1, 2, 77, 32, generator=gen).half().to(DEVICE) for _ in range(3))
    out, lse = flash_attn_forward(q, k, v, causal=True, return_lse=True)
    s = (q.double() @ k.double().transpose(-1, -2)) / 32**0.5
    s = s.masked_fill(torch.ones(77, 77, dtype=torch.bool, device=DEVICE).triu(1), float("-inf"))
    torch.testing.assert_close(lse.double(), torch.logsumexp(s, -1), atol=2e-3, rtol=1e-3)
    assert lse.shape == (1, 2, 77) and lse.dtype == torch.float32


def test_sm_scale_and_explicit_config(gen):
    q, k, v = (torch.randn(1, 1, 100, 64, generator=gen).half().to(DEVICE) for _ in range(3))
    exact = reference_attn(q, k, v, causal=False, sm_scale=0.3, upcast=True)
    out = flash_attn_forward(q, k, v, causal=False, sm_scale=0.3, config=FwdConfig(32, 16, 4, 1))
    assert (out.double() - exact).abs().max() < 2e-3


def test_results_do_not_depend_on_the_run(gen):
    q, k, v = (torch.randn(1, 2, 200, 64, generator=gen).half().to(DEVICE) for _ in range(3))
    first = flash_attn_forward(q, k, v)
    assert torch.equal(first, flash_attn_forward(q, k, v))


@pytest.mark.parametrize("shape", [(0, 2, 16, 64), (1, 2, 0, 64), (1, 0, 16, 64)])
def test_empty_inputs_give_empty_outputs(shape):
    q = torch.empty(shape, dtype=torch.float16, device=DEVICE)
    out, lse = flash_attn_forward(q, q, q, return_lse=True)
    assert out.shape == shape and lse.shape == shape[:3]


def test_config_is_a_multiple_for_the_causal_band():
    for d in SUPPORTED_HEAD_DIMS:
        for device, arch in (("cuda", 90), ("cuda", 80), ("cuda", 89), ("cpu", None)):
            for n, bh in ((None, None), (64, 8), (1024, 256), (2048, 8), (4096, 128), (16384, 16)):
                cfg = get_fwd_config(d, True, device, n, bh, 132, arch)
                assert cfg.BLOCK_M % cfg.BLOCK_N == 0


@pytest.mark.parametrize("arch", [80, 86, 89, 100])
def test_other_architectures_get_the_portable_table_without_tma(arch):
    for d in SUPPORTED_HEAD_DIMS:
        for causal in (False, True):
            for n, bh in ((256, 8), (4096, 128), (16384, 16)):
                cfg = get_fwd_config(d, causal, "cuda", n, bh, 108, arch)
                assert cfg == portable_config(d) and not cfg.TMA


@pytest.mark.parametrize("sm_scale", [0.0, -0.125, float("nan"), float("inf")])
def test_sm_scale_must_be_positive(sm_scale):
    q = half(1, 1, 16, 16)
    with pytest.raises(ValueError, match="sm_scale must be a finite number > 0"):
        flash_attn_forward(q, q, q, sm_scale=sm_scale)


def half(*shape):
    return torch.randn(*shape).half().to(DEVICE)


@pytest.mark.parametrize(
    "args, error, message",
    [
        ((half(2, 16, 64), half(2, 16, 64), half(2, 16, 64)), ValueError, "rank 4"),
        ((half(1, 2, 16, 64), half(1, 2, 17, 64), half(1, 2, 17, 64)), ValueError, "to match Q"),
        ((half(1, 2, 16, 64), half(1, 2, 16, 64), half(1, 2, 8, 64)), ValueError, "same shape"),
        ((half(1, 3, 16, 64), half(1, 2, 16, 64), half(1, 2, 16, 64)), ValueError, "multiple"),
        ((half(1, 2, 16, 48),) * 3, ValueError, "accepted: \\(16, 32, 64, 128, 256\\)"),
        ((half(1, 2, 16, 64).float(),) * 3, TypeError, "accepted: torch.float16, torch.bfloat16"),
        ((torch.ones(1, 2, 16, 64, dtype=torch.int32),) * 3, TypeError, "accepted"),
        (("q", "k", "v"), TypeError, "torch.Tensor"),
    ],
)
def test_bad_input_is_rejected_with_a_clear_error(args, error, message):
    with pytest.raises(error, match=message):
        flash_attn_forward(*args)


def test_mixed_dtypes_are_rejected():
    with pytest.raises(TypeError, match="one dtype"):
        flash_attn_forward(half(1, 1, 8, 16), half(1, 1, 8, 16).bfloat16(), half(1, 1, 8, 16))


@pytest.mark.skipif(HAS_CUDA, reason="checks CPU tensors without the interpreter")
def test_cpu_tensors_without_the_interpreter_are_rejected(monkeypatch):
    monkeypatch.setattr(inputs, "INTERPRETED", False)
    monkeypatch.setattr(launch, "LAUNCHES", {})  # as in a process that never interpreted
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        flash_attn_forward(half(1, 1, 8, 16), half(1, 1, 8, 16), half(1, 1, 8, 16))


@requires_gpu
def test_tensors_on_different_devices_are_rejected():
    with pytest.raises(ValueError, match="one device"):
        flash_attn_forward(half(1, 1, 8, 16), half(1, 1, 8, 16).cpu(), half(1, 1, 8, 16))


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("n", [64, 256, 1024, 4096])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_lab_grid_on_the_gpu(gen, n, causal, dtype):
    check(2, 4, n, 64, causal, dtype, gen=gen)


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_agrees_with_sdpa_on_the_gpu(gen, causal):
    q, k, v = (torch.randn(2, 8, 2048, 128, generator=gen).half().cuda() for _ in range(3))
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(flash_attn_forward(q, k, v, causal=causal), expected,
                               atol=4e-3, rtol=0)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("h_kv", [1, 2])
def test_tma_descriptor_path_matches_pointer_path(gen, causal, h_kv):
    q = torch.randn(1, 2, 77, 32, generator=gen).half().to(DEVICE)
    k, v = (torch.randn(1, h_kv, 77, 32, generator=gen).half().to(DEVICE) for _ in range(2))
    tma, lse_tma = flash_attn_forward(q, k, v, causal=causal, return_lse=True,
                                      config=FwdConfig(64, 32, 4, 2, "tl_tma"))
    ptr, lse_ptr = flash_attn_forward(q, k, v, causal=causal, return_lse=True,
                                      config=FwdConfig(64, 32, 4, 2, "tl"))
    torch.testing.assert_close(tma, ptr, atol=1e-3, rtol=0)
    torch.testing.assert_close(lse_tma, lse_ptr, atol=1e-4, rtol=0)
    exact = reference_attn(q, k, v, causal=causal, upcast=True)
    assert (tma.double() - exact).abs().max() < 2e-3


def far_apart_rows(N, d, row_stride, gen, misalign=False):
    """Q, K, V as views whose rows lie `row_stride` elements apart in one storage.

    The storage is allocated, never filled beyond the rows the views use: past 2³¹ elements it
    costs address space, not memory. `misalign` shifts every view by one element (2 bytes),
    which TMA cannot take, so the pointer-load kernel runs.
    """
    shift = int(misalign)
    base = torch.empty(row_stride * (N - 1) + 3 * d + shift, dtype=torch.float16, device=DEVICE)
    views = []
    for j in range(3):
        view = base.as_strided((1, 1, N, d), (0, 0, row_stride, 1), shift + j * d)
        view.copy_(torch.randn(1, 1, N, d, generator=gen).half())
        views.append(view)
    return views


@pytest.mark.parametrize("path", ["tl", "tl_tma"])
@pytest.mark.parametrize("causal", [False, True])
def test_rows_past_2_31_elements_are_addressed_in_64_bits(gen, path, causal):
    # rows 2²⁵ + 64 elements apart: query row 64 and key tile 64 start at 2³¹ + 2¹², and the
    # last row at ~4.3e9, where a 32-bit offset wraps
    q, k, v = far_apart_rows(130, 64, 2**25 + 64, gen)
    assert q.storage_offset() + 129 * q.stride(2) > 2**32
    out = flash_attn_forward(q, k, v, causal=causal, config=FwdConfig(64, 64, 4, 1, path))
    exact = reference_attn(q, k, v, causal=causal, upcast=True)
    torch_err = (reference_attn(q, k, v, causal=causal).double() - exact).abs().max().item()
    err = (out.double() - exact).abs().max().item()
    print(f"kernel {err:.2e} torch {torch_err:.2e}")
    assert err <= tolerance(torch_err)


def test_grid_puts_every_program_on_one_axis():
    assert grid(1000, 70_000, 64) == (16 * 70_000, 1, 1)  # B·H past the y axis' 65,535
    with pytest.raises(ValueError, match=f"at most {MAX_PROGRAMS}"):
        grid(2**20, 2**20, 64)


@pytest.mark.skipif(HAS_CUDA, reason="checks the interpreter")
def test_bfloat16_is_refused_under_the_interpreter():
    q = half(1, 1, 16, 16).bfloat16()
    with pytest.raises(TypeError, match="refused under Triton's interpreter: tl.dot on bf16"):
        flash_attn_forward(q, q, q)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # LSE saturates at inf
@pytest.mark.parametrize("sm_scale", [1e6, 1e37])
def test_a_huge_sm_scale_is_a_hard_maximum_as_in_float64(gen, sm_scale):
    # scaled scores far past float32's range: the softmax picks each row's largest score
    q, k, v = (torch.randn(1, 2, 70, 32, generator=gen).half().to(DEVICE) for _ in range(3))
    out, lse = flash_attn_forward(q, k, v, causal=False, sm_scale=sm_scale, return_lse=True)
    assert not out.isnan().any() and not lse.isnan().any()
    scores = q.double() @ k.double().transpose(-1, -2)
    top2 = scores.topk(2, dim=-1).values
    clear = (top2[..., 0] - top2[..., 1]) > 1e-3 * top2[..., 0].abs()  # no near-tie in the row
    exact = reference_attn(q, k, v, causal=False, sm_scale=sm_scale, upcast=True)
    assert clear.float().mean() > 0.9
    torch.testing.assert_close(out.double()[clear], exact[clear], atol=1e-3, rtol=0)


def test_equal_scores_at_a_huge_scale_stay_a_uniform_softmax(gen):
    # q = k = 256 everywhere: every score is 2^20 exactly, in any order of summation (a BLAS that
    # sums the columns of a float32 dot in different orders rounds 65504² · 16 differently by one
    # ulp, which a scale of 1e30 makes a real difference), and every scaled score, 2^20 · 1e35, is
    # past float32's range
    qk = torch.full((1, 1, 40, 16), 256.0, dtype=torch.float16, device=DEVICE)
    v = torch.randn(1, 1, 40, 16, generator=gen).half().to(DEVICE)
    out = flash_attn_forward(qk, qk, v, causal=False, sm_scale=1e35)
    torch.testing.assert_close(out.double(), v.double().mean(2, keepdim=True).expand_as(out),
                               atol=1e-3, rtol=0)


def test_inputs_that_require_grad_are_refused_while_autograd_is_on(gen):
    q, k, v = (torch.randn(1, 1, 16, 16, generator=gen).half().to(DEVICE) for _ in range(3))
    with pytest.raises(ValueError, match="K require grad, but this kernel is forward-only"):
        flash_attn_forward(q, k.requires_grad_(), v)
    with torch.no_grad():
        out = flash_attn_forward(q, k, v)
    assert not out.requires_grad


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("d, misalign", [(256, False), (128, True), (128, False)])
def test_long_transposed_sequence_past_2_31_elements_on_the_gpu(gen, d, misalign):
    # (B, N, H, d) = (1, 600000, 16, d) read as (B, H, N, d): row n of a head starts at n·H·d,
    # past 2³¹ from n = 524,288 at d = 256 (and 1,048,576 / H·d at d = 128: misaligned, the
    # pointer-load kernel runs; aligned, on Hopper, the Gluon kernel)
    N, H = 600_000 if d == 256 else 1_100_000, 16
    base = torch.empty(N * H * d * 3 + int(misalign), dtype=torch.float16, device="cuda")
    q, k, v = (base[int(misalign) + i * N * H * d:][:N * H * d].view(1, N, H, d).transpose(1, 2)
               for i in range(3))
    for t in (q, k, v):
        t.normal_(generator=torch.Generator(device="cuda").manual_seed(int(gen.initial_seed() % 2**31)))
    out = flash_attn_forward(q, k, v, causal=True)
    rows = torch.tensor([0, 1000, 524_287, 524_288, 600_000 - 1, N - 1]).unique().cuda()
    for h in (0, H - 1):
        s = (q[0, h, rows].double() @ k[0, h].double().T) / d**0.5
        s = s.masked_fill(torch.arange(N, device="cuda")[None, :] > rows[:, None], float("-inf"))
        exact = torch.softmax(s, -1) @ v[0, h].double()
        err = (out[0, h, rows].double() - exact).abs().max().item()
        print(f"d={d} head {h}: max error {err:.2e} over rows {rows.tolist()}")
        assert err < 2e-3


@requires_gpu
@pytest.mark.gpu
def test_batch_heads_past_65535_on_the_gpu(gen):
    q, k, v = (torch.randn(2, 35_000, 40, 16, generator=gen).half().cuda() for _ in range(3))
    out = flash_attn_forward(q, k, v, causal=True)
    exact = reference_attn(q, k, v, causal=True, upcast=True)
    assert (out.double() - exact).abs().max().item() < 2e-3


def test_the_policy_takes_the_gluon_kernel_on_hopper_at_d128_only():
    big = dict(device_type="cuda", n=4096, batch_heads=64, sm_count=132)
    for causal in (False, True):
        assert get_fwd_config(128, causal, arch=90, **big) == gluon_config()
        assert get_fwd_config(128, causal, arch=90, **big).path == "gluon"
        assert get_fwd_config(64, causal, arch=90, **big) == tl_config(64, causal, arch=90, **big)
        assert get_fwd_config(128, causal, arch=80, **big).path == "tl"  # no Gluon off Hopper
        # launch-bound sizes stay on the light pointer path
        assert get_fwd_config(128, causal, "cuda", 64, 1, 132, 90) == portable_config(128)
        assert get_fwd_config(128, causal, "cpu").path == "tl"


@pytest.mark.skipif(HAS_CUDA, reason="checks the CPU")
def test_a_gluon_config_runs_the_tl_kernel_where_gluon_cannot_run(gen):
    # Gluon has no interpreter: on the CPU the tl kernel's own choice runs, and says so

    q, k, v = (torch.randn(1, 2, 77, 128, generator=gen).half() for _ in range(3))
    used = launch_config(q, k, v, True, gluon_config())
    assert used.path == "tl"
    out = flash_attn_forward(q, k, v, causal=True, config=gluon_config())
    exact = reference_attn(q, k, v, causal=True, upcast=True)
    assert (out.double() - exact).abs().max() < 2e-3


def _hopper():
    return HAS_CUDA and torch.cuda.get_device_capability() == (9, 0)


requires_hopper = pytest.mark.skipif(not _hopper(), reason="the Gluon kernel runs on Hopper (sm_90) only")


@requires_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("n, h_kv, layout", [(1, 2, "contiguous"), (77, 1, "contiguous"),
                                             (1000, 2, "bnhd"), (4096, 4, "contiguous")])
def test_the_gluon_kernel_matches_float64(gen, causal, dtype, n, h_kv, layout):
    d, cfg = 128, gluon_config()
    tdtype = getattr(torch, dtype)

    def rand(heads):
        if layout == "bnhd":
            return torch.randn(2, n, heads, d, generator=gen).to("cuda", tdtype).transpose(1, 2)
        return torch.randn(2, heads, n, d, generator=gen).to("cuda", tdtype)

    q, k, v = rand(4), rand(h_kv), rand(h_kv)
    assert launch_config(q, k, v, causal, cfg).path == "gluon"
    poison = torch.full((2, 4, n, d), float("nan"), dtype=tdtype, device="cuda")
    del poison  # the output reuses the NaN-filled block: an unwritten element shows as NaN
    out, lse = flash_attn_forward(q, k, v, causal=causal, config=cfg, return_lse=True)
    exact = reference_attn(q, k, v, causal=causal, upcast=True)
    torch_err = (reference_attn(q, k, v, causal=causal).double() - exact).abs().max().item()
    err = (out.double() - exact).abs().max().item()
    print(f"gluon d={d} causal={causal} {dtype} N={n} H_kv={h_kv} {layout}: {err:.2e} "
          f"torch {torch_err:.2e}")
    assert not torch.isnan(out).any() and err <= tolerance(torch_err)
    tl_out, tl_lse = flash_attn_forward(q, k, v, causal=causal, return_lse=True,
                                        config=FwdConfig(64, 64, 4, 2))
    torch.testing.assert_close(lse, tl_lse, atol=1e-4, rtol=1e-5)


@requires_hopper
@pytest.mark.gpu
def test_the_gluon_kernel_takes_a_huge_sm_scale_and_many_programs(gen):
    q, k, v = (torch.randn(1, 3, 300, 128, generator=gen).half().cuda() for _ in range(3))
    for scale in (1e-3, 1e6, 1e37):
        out = flash_attn_forward(q, k, v, causal=True, sm_scale=scale, config=gluon_config())
        s = (q.double() @ k.double().transpose(-1, -2)) * scale
        s = s.masked_fill(torch.ones(300, 300, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
        exact = torch.softmax(s - s.amax(-1, keepdim=True), -1) @ v.double()
        assert not torch.isnan(out).any() and (out.double() - exact).abs().max() < 2e-3, scale
    # B·H past the grid's y axis
    q, k, v = (torch.randn(2, 35_000, 40, 128, generator=gen).half().cuda() for _ in range(3))
    out = flash_attn_forward(q, k, v, causal=False, config=gluon_config())
    assert (out.double() - reference_attn(q, k, v, causal=False, upcast=True)).abs().max() < 2e-3


def test_a_repeated_call_skips_the_checks_and_the_policy_and_gives_the_same_output(gen, monkeypatch):
    q, k, v = (torch.randn(1, 2, 70, 32, generator=gen).half().to(DEVICE) for _ in range(3))
    first = flash_attn_forward(q, k, v, causal=True)
    policy_calls = []
    real = flash.launch_config
    monkeypatch.setattr(flash, "launch_config", lambda *a, **kw: policy_calls.append(a) or real(*a, **kw))
    again = flash_attn_forward(q.clone(), k.clone(), v.clone(), causal=True)
    assert policy_calls == []  # the same shapes, strides, dtypes and alignment: launched as before
    torch.testing.assert_close(again, first, rtol=0, atol=0)
    # what the first call was not: another causality, layout, address modulo 16 or dtype
    flash_attn_forward(q, k, v, causal=False)
    flash_attn_forward(q.transpose(1, 2).contiguous().transpose(1, 2), k, v, causal=True)
    shifted = torch.empty(q.numel() + 1, dtype=q.dtype, device=DEVICE)[1:].view(q.shape).copy_(q)
    out = flash_attn_forward(shifted, k, v, causal=True)
    assert len(policy_calls) == 3
    torch.testing.assert_close(out, first, rtol=0, atol=0)


@requires_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_a_repeated_gluon_call_is_launched_directly_and_gives_the_same_output(gen, monkeypatch, causal):
    q, k, v = (torch.randn(2, 4, 333, 128, generator=gen).half().cuda() for _ in range(3))
    cfg = gluon_config()
    assert flash.launch_config(q, k, v, causal, cfg).path == "gluon"
    first = flash_attn_forward(q, k, v, causal=causal, config=cfg)
    policy_calls = []
    real = flash.launch_config
    monkeypatch.setattr(flash, "launch_config", lambda *a, **kw: policy_calls.append(a) or real(*a, **kw))
    again = flash_attn_forward(q.clone(), k.clone(), v.clone(), causal=causal, config=cfg)
    assert policy_calls == []
    torch.testing.assert_close(again, first, rtol=0, atol=0)
    exact = reference_attn(q, k, v, causal=causal, upcast=True)
    torch_err = (reference_attn(q, k, v, causal=causal).double() - exact).abs().max().item()
    assert (again.double() - exact).abs().max().item() <= tolerance(torch_err)


def test_a_repeated_call_is_refused_what_the_first_was_refused(gen):
    q, k, v = (torch.randn(1, 2, 40, 32, generator=gen).half().to(DEVICE) for _ in range(3))
    flash_attn_forward(q, k, v, causal=True)
    with pytest.raises(ValueError, match="Q require grad"):
        flash_attn_forward(q.requires_grad_(), k, v, causal=True)
    with pytest.raises(ValueError, match="sm_scale must be a finite number"):
        flash_attn_forward(q.detach(), k, v, causal=True, sm_scale=float("nan"))
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        flash_attn_forward(q.detach().cpu().numpy(), k, v, causal=True)


@pytest.mark.parametrize("path", ["tl", "tl_tma", "gluon"])
def test_the_direct_launch_passes_a_compiled_kernel_what_it_takes(gen, path):
    # a compiled kernel's runner takes a three-dimensional grid and every argument, constexprs
    # included, in the kernel's order (what Triton's JIT binds by name)

    seen = []

    class Compiled:
        def __getitem__(self, grid):
            return lambda *args: seen.append((grid, args))

    q, k, v = (torch.randn(1, 2, 70, 64, generator=gen).half().to(DEVICE) for _ in range(3))
    o = torch.empty_like(q)
    cfg = gluon_config() if path == "gluon" else FwdConfig(64, 64, 4, 1, path)
    launch.run(flash.arguments_of(cfg), q, k, v, o, o, 0.25, cfg, True, False, Compiled())
    make = hopper.arguments if path == "gluon" else flash.arguments
    kernel, grid, args, _ = make(q, k, v, o, o, 0.25, cfg, True, False)
    [(launched_grid, launched)] = seen
    assert list(args) == kernel.arg_names
    assert len(launched_grid) == 3 and launched_grid == grid
    assert len(launched) == len(args)
    for name, value, direct in zip(args, args.values(), launched, strict=True):
        if "desc" in name:  # what the launcher reads of a descriptor
            assert (direct.base, direct.shape, direct.strides, direct.padding) == (
                value.base, value.shape, value.strides, value.padding), name
        else:
            assert direct is value or direct == value, name
