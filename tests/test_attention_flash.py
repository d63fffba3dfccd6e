"""The Triton kernel: on a CUDA device when there is one, else under Triton's CPU interpreter.

The accuracy rule of tests/ and of the workflow's sweep: against a float64 reference,
err_kernel <= max(1e-3, 2 × err_torch), where err_torch is PyTorch's own low-precision
attention's error on the same inputs (see minimodel.correctness).
"""

import pytest
import torch
from conftest import DEVICE, HAS_CUDA, requires_gpu

from minimodel import correctness
from minimodel.attention import reference_attn
from minimodel.attention_flash import (
    SUPPORTED_HEAD_DIMS,
    FwdConfig,
    flash_attn_forward,
    get_fwd_config,
)

BF16_SKIP = pytest.mark.skipif(not HAS_CUDA, reason=correctness.BF16_INTERPRETER_REASON)


def check(B, H, N, d, causal, dtype="float16", gen=None, **kw):
    row = correctness.check_case(B, H, N, d, causal, dtype, device=DEVICE, generator=gen, **kw)
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
        for device in ("cuda", "cpu"):
            for n, bh in ((None, None), (64, 8), (1024, 256), (2048, 8), (4096, 128), (16384, 16)):
                cfg = get_fwd_config(d, True, device, n, bh, 132)
                assert cfg.BLOCK_M % cfg.BLOCK_N == 0


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
    from minimodel import attention_flash

    monkeypatch.setattr(attention_flash, "INTERPRETED", False)
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
def test_seed_grid_on_the_gpu(gen, n, causal, dtype):
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
                                      config=FwdConfig(64, 32, 4, 2, TMA=True))
    ptr, lse_ptr = flash_attn_forward(q, k, v, causal=causal, return_lse=True,
                                      config=FwdConfig(64, 32, 4, 2, TMA=False))
    torch.testing.assert_close(tma, ptr, atol=1e-3, rtol=0)
    torch.testing.assert_close(lse_tma, lse_ptr, atol=1e-4, rtol=0)
    exact = reference_attn(q, k, v, causal=causal, upcast=True)
    assert (tma.double() - exact).abs().max() < 2e-3
