"""The Triton backward (`minimodel.kernel.backward`) and the differentiable entry point
(`minimodel.kernel.attention`), on a CUDA device when there is one, else under Triton's CPU
interpreter.

The accuracy rule is the forward's, per gradient (minimodel.gpu.kernel_check): against float64 autograd,
err_kernel <= max(1e-3, 2 × err_torch), err_torch being PyTorch autograd's own in the same dtype.
The interpreter runs one program at a time (tens of milliseconds each): the CPU cases are one or
two heads of short sequences; the `gpu` cases are the bigger sweep.

The inputs are fixed per test (`gen`), not fresh each run as elsewhere: on rare inputs dQ misses
the rule's 2× margin (`test_a_rare_input_where_dq_misses_the_rule_says_why`, notes/backward.md).
"""


import pytest
import torch
from conftest import DEVICE, HAS_CUDA, requires_gpu

from minimodel.floor.attention_ref import reference_attn
from minimodel.floor.correctness_rule import reference_grads, tolerance
from minimodel.gpu.kernel_check import check_backward_case
from minimodel.kernel import (
    BF16_INTERPRETER_REASON,
    BwdConfig,
    attention,
    backward_fn,
    flash_attn_backward,
    flash_attn_forward,
    get_bwd_config,
)
from minimodel.kernel.backward import arguments

BF16_SKIP = pytest.mark.skipif(not HAS_CUDA, reason=BF16_INTERPRETER_REASON)


@pytest.fixture
def gen(fixed_gen):
    """A generator seeded from the test's name: the same inputs every run (conftest)."""
    return fixed_gen


def check(B, H, N, d, causal, dtype="float16", gen=None, **kw):
    row = check_backward_case(B, H, N, d, causal, dtype, device=DEVICE, generator=gen, **kw)
    print(" ".join(f"{g}: kernel {row[f'err_{g}_kernel_vs_fp64']:.2e} "
                   f"torch {row[f'err_{g}_torch_vs_fp64']:.2e}" for g in ("dq", "dk", "dv")))
    assert not row["has_nan"]
    assert row["passed"], row
    return row


def within_rule(got, exact, lowp) -> bool:
    """The correctness rule for one gradient: its error against float64 against PyTorch's."""
    err, err_torch = ((t.double() - exact).abs().max().item() for t in (got, lowp))
    print(f"kernel {err:.2e} torch {err_torch:.2e}")
    return err <= tolerance(err_torch)


def half(*shape, gen=None):
    return torch.randn(*shape, generator=gen).half().to(DEVICE)


@pytest.mark.parametrize("n", [1, 37, 100, 130])
@pytest.mark.parametrize("causal", [False, True])
def test_gradients_match_float64_autograd_for_any_n(gen, n, causal):
    check(1, 1, n, 64, causal, gen=gen)


@pytest.mark.parametrize("causal", [False, True])
def test_head_dim_128(gen, causal):
    row = check(1, 1, 70, 128, causal, gen=gen)
    assert row["path"] == "tl" and row["forward_path"] in ("tl", "gluon") and row["BLOCK_N1"] > 0


@pytest.mark.parametrize("d", [16, 32, 256])
def test_other_head_dims_of_the_forward(gen, d):
    check(1, 1, 45, d, True, gen=gen)


@pytest.mark.parametrize("h_kv", [1, 2])
@pytest.mark.parametrize("causal", [False, True])
def test_grouped_query_heads_sum_dk_dv_over_the_group(gen, h_kv, causal):
    check(1, 4, 65, 32, causal, gen=gen, H_kv=h_kv)


@pytest.mark.parametrize("causal", [False, True])
def test_transposed_bnhd_layout_is_read_through_its_strides(gen, causal):
    check(2, 2, 50, 32, causal, gen=gen, layout="bnhd")


@pytest.mark.parametrize("config", [BwdConfig(16, 64, 64, 16), BwdConfig(64, 64, 32, 32),
                                    BwdConfig(16, 16, 16, 16), BwdConfig(32, 128, 128, 32),
                                    BwdConfig(64, 128, 128, 64)])
def test_any_valid_tiling_gives_the_same_gradients(gen, config):
    check(1, 2, 100, 32, True, gen=gen, H_kv=1, config=config)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the rows past N, on purpose
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_rows_whose_every_score_is_very_negative_leave_no_nan(fixed_gen):
    # every q·k ≈ -200 after scaling, so LSE ≈ -196: a zero key row past N (ragged tile) has
    # p = exp(0 - LSE), past float32's range; it must not reach a stored gradient
    d, N = 32, 100
    u = torch.ones(d) / d**0.5
    q = (33.6 * u + 0.1 * torch.randn(1, 1, N, d, generator=fixed_gen)).half().to(DEVICE)
    k = (-33.6 * u + 0.1 * torch.randn(1, 1, N, d, generator=fixed_gen)).half().to(DEVICE)
    v, do = half(1, 1, N, d, gen=fixed_gen), half(1, 1, N, d, gen=fixed_gen)
    o, lse = flash_attn_forward(q, k, v, causal=False, return_lse=True)
    assert lse.max().item() < -150
    got = flash_attn_backward(q, k, v, o, lse, do, False, config=BwdConfig(32, 64, 64, 32))
    exact = reference_grads(q, k, v, do, False, upcast=True)
    lowp = reference_grads(q, k, v, do, False)
    for g, e, t in zip(got, exact, lowp, strict=True):
        assert not g.isnan().any() and within_rule(g, e, t)


def test_sm_scale_is_applied(gen):
    check(1, 1, 60, 32, False, gen=gen, sm_scale=0.3)


def test_gradients_are_deterministic(gen):
    q, k, v, do = half(1, 4, 90, 32, gen=gen), half(1, 1, 90, 32, gen=gen), half(1, 1, 90, 32, gen=gen), \
        half(1, 4, 90, 32, gen=gen)
    o, lse = flash_attn_forward(q, k, v, causal=True, return_lse=True)
    first = flash_attn_backward(q, k, v, o, lse, do, True)
    second = flash_attn_backward(q, k, v, o, lse, do, True)
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("sm_scale", [None, 0.5])
def test_attention_is_differentiable_through_autograd(fixed_gen, sm_scale):
    q, k, v = (half(1, 2, 40, 32, gen=fixed_gen).requires_grad_() for _ in range(3))
    v.requires_grad_(False)  # a gradient only where one is asked for
    out = attention(q, k, v, causal=True, sm_scale=sm_scale)
    torch.testing.assert_close(out.double(), reference_attn(q, k, v, causal=True, sm_scale=sm_scale,
                                                            upcast=True), atol=2e-3, rtol=0)
    out.sum().backward()  # dO = ones, broadcast: every stride 0
    ones = torch.ones_like(out)
    exact = reference_grads(q, k, v, ones, causal=True, sm_scale=sm_scale, upcast=True)
    lowp = reference_grads(q, k, v, ones, causal=True, sm_scale=sm_scale)
    for got, e, t in ((q.grad, exact[0], lowp[0]), (k.grad, exact[1], lowp[1])):
        assert got.shape == e.shape and got.dtype == torch.float16
        assert within_rule(got, e, t)
    assert v.grad is None


def test_attention_hands_deterministic_to_the_backward(gen, monkeypatch):
    # off Hopper the tl kernels run either way (deterministic), so the flag's path is what is checked
    from minimodel.kernel import autograd

    seen = []
    real = autograd.flash_attn_backward

    def spy(*args, **kwargs):
        seen.append(kwargs["deterministic"])
        return real(*args, **kwargs)

    monkeypatch.setattr(autograd, "flash_attn_backward", spy)
    q, k, v = (half(1, 1, 24, 16, gen=gen).requires_grad_() for _ in range(3))
    grads = [torch.autograd.grad(attention(q, k, v, causal=True, deterministic=flag).sum(), (q, k, v))
             for flag in (False, True)]
    assert seen == [False, True]
    assert all(torch.equal(a, b) for a, b in zip(*grads, strict=True))


def test_attention_without_grad_is_the_forward(gen):
    q, k, v = (half(1, 1, 30, 16, gen=gen) for _ in range(3))
    assert torch.equal(attention(q, k, v), flash_attn_forward(q, k, v, causal=False))
    with torch.no_grad():
        out = attention(q.requires_grad_(), k, v, causal=True)
    assert not out.requires_grad


def test_the_forward_alone_points_to_the_differentiable_entry_point(gen):
    q = half(1, 1, 16, 16, gen=gen).requires_grad_()
    with pytest.raises(ValueError, match="forward-only .* take minimodel.kernel.attention"):
        flash_attn_forward(q, q, q)


def test_double_backward_is_refused(gen):
    q, k, v = (half(1, 1, 20, 16, gen=gen).requires_grad_() for _ in range(3))
    (dq,) = torch.autograd.grad(attention(q, k, v).sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="does not require grad|differentiate twice"):
        dq.sum().backward()


def test_backward_fn_runs_the_backward_of_saved_outputs(fixed_gen):
    q, k, v = (half(1, 1, 50, 32, gen=fixed_gen) for _ in range(3))
    do = half(1, 1, 50, 32, gen=fixed_gen)
    dq, dk, dv = backward_fn(q, k, v, causal=True, do=do)()
    exact = reference_grads(q, k, v, do, causal=True, upcast=True)
    for got, e in zip((dq, dk, dv), exact, strict=True):
        assert (got.double() - e).abs().max().item() < 4e-3


def far_apart_rows(N, d, row_stride, gen, count=4):
    """`count` (1, 1, N, d) views whose rows lie `row_stride` elements apart in one storage that
    is never filled beyond them: past 2³¹ elements it costs address space, not memory."""
    base = torch.empty(row_stride * (N - 1) + count * d, dtype=torch.float16, device=DEVICE)
    views = []
    for j in range(count):
        view = base.as_strided((1, 1, N, d), (0, 0, row_stride, 1), j * d)
        view.copy_(torch.randn(1, 1, N, d, generator=gen).half())
        views.append(view)
    return views


@pytest.mark.parametrize("causal", [False, True])
def test_rows_past_2_31_elements_are_addressed_in_64_bits(fixed_gen, causal):
    # rows 2²⁵ + 64 elements apart: row 64 starts past 2³¹ and the last row at ~4.3e9
    q, k, v, do = far_apart_rows(130, 64, 2**25 + 64, fixed_gen)
    assert 129 * q.stride(2) > 2**32
    o, lse = flash_attn_forward(q, k, v, causal=causal, return_lse=True)
    got = flash_attn_backward(q, k, v, o, lse, do, causal, config=BwdConfig(64, 64, 64, 64))
    exact = reference_grads(q, k, v, do, causal, upcast=True)
    lowp = reference_grads(q, k, v, do, causal)
    for g, e, t in zip(got, exact, lowp, strict=True):
        assert within_rule(g, e, t)


def test_every_launch_puts_its_programs_on_one_grid_axis():
    # B·H = 70,000 past a CUDA grid's y axis (65,535): each launch is one-dimensional
    big = torch.empty(1, 1, 100, 16, dtype=torch.float16).expand(1, 70_000, 100, 16)
    small = torch.empty(1, 1, 100, 16, dtype=torch.float16).expand(1, 7_000, 100, 16)
    lse = torch.empty(1, 70_000, 100)
    cfg = BwdConfig(32, 64, 64, 32)
    launches = arguments(big, small, small, big, lse, big, big, small, small, lse, 0.25, cfg, True)
    assert [grid for _, grid, _, _ in launches] == [(2 * 70_000, 1, 1), (2 * 7_000, 1, 1), (2 * 70_000, 1, 1)]


def test_config_rules():
    with pytest.raises(ValueError, match="BLOCK_N1 .* multiple of BLOCK_M1"):
        BwdConfig(64, 32, 64, 32)
    with pytest.raises(ValueError, match="powers of two >= 16"):
        BwdConfig(32, 64, 48, 16)
    # the kernels are named by flags, each checked against what it runs beside
    with pytest.raises(ValueError, match="dkdv 'gluon', dq 'tl_pass'; accepted: dkdv one of tl, gluon_ws"):
        BwdConfig(32, 64, 64, 32, dkdv="gluon")
    with pytest.raises(ValueError, match="dq 'atomic'"):
        BwdConfig(32, 64, 64, 32, dq="atomic")
    for dq in ("gluon_pass", "in_kernel"):
        with pytest.raises(ValueError, match=f"dq '{dq}' runs beside the gluon_ws dK/dV kernel"):
            BwdConfig(64, 128, 128, 64, dq=dq)
    with pytest.raises(ValueError, match="gluon_ws: BLOCK_N1 128 and num_warps_kv 12"):
        BwdConfig(64, 64, 128, 64, 12, 2, dkdv="gluon_ws")
    with pytest.raises(ValueError, match="in_kernel dQ: BLOCK_M1 is 64 or 128"):
        BwdConfig(32, 128, 128, 64, 12, 2, dkdv="gluon_ws", dq="in_kernel")
    cfg = BwdConfig(32, 64, 64, 32)
    assert (cfg.dkdv, cfg.dq, cfg.language, cfg.dq_consumers, cfg.deterministic) == (
        "tl", "tl_pass", "tl", None, True)
    assert get_bwd_config(64, True, "cuda").BLOCK_N1 % get_bwd_config(64, True, "cuda").BLOCK_M1 == 0
    assert get_bwd_config(32, False, "cuda") == get_bwd_config(64, False, "cuda")
    assert get_bwd_config(128, True, "cuda", arch=86) != get_bwd_config(128, True, "cuda", arch=90)


def _inputs(gen, N=16, d=16):
    q, k, v, do = (half(1, 2, N, d, gen=gen) for _ in range(4))
    o, lse = flash_attn_forward(q, k, v, causal=False, return_lse=True)
    return q, k, v, o, lse, do


def test_bad_inputs_are_refused_with_what_is_accepted(gen):
    q, k, v, o, lse, do = _inputs(gen)
    with pytest.raises(TypeError, match="dtype torch.float32; accepted: torch.float16, torch.bfloat16"):
        flash_attn_backward(q.float(), k, v, o, lse, do)
    with pytest.raises(ValueError, match=r"head dim 48 is not supported; accepted: \(16, 32, 64, 128, 256\)"):
        x = half(1, 2, 16, 48, gen=gen)
        flash_attn_backward(x, x, x, x, lse, x)
    with pytest.raises(ValueError, match=r"dO must have Q's shape \(B, H, N, d\) = \(1, 2, 16, 16\)"):
        flash_attn_backward(q, k, v, o, lse, do[:, :1])
    with pytest.raises(TypeError, match="O has dtype torch.float32; accepted: Q's dtype, torch.float16"):
        flash_attn_backward(q, k, v, o.float(), lse, do)
    with pytest.raises(ValueError, match=r"LSE must be float32 of shape \(B, H, N\) = \(1, 2, 16\)"):
        flash_attn_backward(q, k, v, o, lse.half(), do)
    with pytest.raises(ValueError, match=r"LSE must be float32 of shape"):
        flash_attn_backward(q, k, v, o, lse[..., :8], do)
    with pytest.raises(ValueError, match="heads \\(2\\) must be a multiple of K/V's heads \\(3\\)"):
        kv = half(1, 3, 16, 16, gen=gen)
        flash_attn_backward(q, kv, kv, o, lse, do)
    with pytest.raises(ValueError, match="sm_scale must be a finite number > 0"):
        flash_attn_backward(q, k, v, o, lse, do, sm_scale=0.0)
    with pytest.raises(ValueError, match="rank 4"):
        flash_attn_backward(q[0], k, v, o, lse, do)


def test_empty_inputs_have_empty_gradients():
    q = torch.empty(1, 2, 0, 16, dtype=torch.float16, device=DEVICE)
    lse = torch.empty(1, 2, 0, device=DEVICE)
    dq, dk, dv = flash_attn_backward(q, q, q, q, lse, q, True)
    assert dq.shape == dk.shape == dv.shape == q.shape


@pytest.mark.skipif(HAS_CUDA, reason="checks the interpreter")
def test_bfloat16_is_refused_under_the_interpreter(gen):
    q, k, v, o, lse, do = (t.bfloat16() if t.dtype == torch.float16 else t for t in _inputs(gen))
    with pytest.raises(TypeError, match="refused under Triton's interpreter: tl.dot on bf16"):
        flash_attn_backward(q, k, v, o, lse, do)


@requires_gpu
def test_tensors_on_different_devices_are_rejected(gen):
    q, k, v, o, lse, do = _inputs(gen)
    with pytest.raises(ValueError, match="dO is on cpu; accepted: Q's device"):
        flash_attn_backward(q, k, v, o, lse, do.cpu())
    with pytest.raises(ValueError, match="LSE must be float32 of shape .* on cuda"):
        flash_attn_backward(q, k, v, o, lse.cpu(), do)


@BF16_SKIP
@pytest.mark.parametrize("causal", [False, True])
def test_bfloat16(gen, causal):
    check(2, 2, 300, 64, causal, "bfloat16", gen=gen)


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("n", [128, 1000, 4096])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_sweep_on_the_gpu(gen, n, d, causal, dtype):
    check(2, 4, n, d, causal, dtype, gen=gen)
    check(2, 4, n, d, causal, dtype, gen=gen, H_kv=1)


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_the_default_forward_kernel_saves_what_the_backward_needs_on_the_gpu(gen, causal):
    # at this size the forward's policy picks its Gluon kernel on Hopper (d = 128), else the tl one
    check(1, 16, 4096, 128, causal, gen=gen)
    check(1, 16, 4096, 128, causal, gen=gen, layout="bnhd")


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_agrees_with_sdpa_backward_on_the_gpu(fixed_gen, causal):
    q, k, v, do = (torch.randn(2, 8, 2048, 128, generator=fixed_gen).half().cuda() for _ in range(4))
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal).backward(do)
    o, lse = flash_attn_forward(q, k, v, causal=causal, return_lse=True)
    for got, expected in zip(flash_attn_backward(q, k, v, o, lse, do, causal), leaves, strict=True):
        torch.testing.assert_close(got, expected.grad, atol=2e-2, rtol=1e-2)


@requires_gpu
@pytest.mark.gpu
def test_batch_heads_past_65535_on_the_gpu(gen):
    check(2, 35_000, 40, 16, True, gen=gen)
    check(2, 35_000, 40, 16, False, gen=gen, H_kv=5_000)


@requires_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_heads_past_2_31_elements_on_the_gpu(fixed_gen, causal):
    # (1, 2560, 8192, 128) contiguous: head h starts at h·2²⁰ elements, past 2³¹ from h = 2048;
    # the last heads of every input, output and gradient lie there (about 50 GB in all)
    B, H, N, d = 1, 2560, 8192, 128
    q, k, v, do = (torch.empty(B, H, N, d, dtype=torch.float16, device="cuda") for _ in range(4))
    for t in (q, k, v, do):
        t.normal_(generator=torch.Generator(device="cuda").manual_seed(int(fixed_gen.initial_seed() % 2**31)))
    assert (H - 2) * N * d > 2**31
    o, lse = flash_attn_forward(q, k, v, causal=causal, return_lse=True)
    got = flash_attn_backward(q, k, v, o, lse, do, causal)
    for heads in (slice(0, 1), slice(H - 2, H)):
        part = [t[:, heads] for t in (q, k, v, do)]
        exact = reference_grads(*part, causal, upcast=True)
        lowp = reference_grads(*part, causal)
        for g, e, t in zip(got, exact, lowp, strict=True):
            assert within_rule(g[:, heads], e, t), heads


@pytest.mark.skipif(HAS_CUDA, reason="the interpreter's arithmetic: the input is rare for that of a GPU too")
def test_a_rare_input_where_dq_misses_the_rule_says_why():
    """On this input (found by a fresh seed; none of seeds 0-799 of the same case misses) the
    kernel's dQ error is 2.7x PyTorch's own: D = rowsum(dO * O) is taken from the fp16 O, as in
    FlashAttention-2, and row 1 of a causal head (two keys) cancels it in dP - D (notes/backward.md).
    The row says so; when the kernel's dQ gets better here, this test fails and goes."""
    row = check_backward_case(1, 4, 65, 32, True, "float16", device=DEVICE, H_kv=1,
                              generator=torch.Generator().manual_seed(8200990571340979938))
    assert not row["passed"] and row["worst"] == "dq"
    assert row["reason"] == (f"dq: error {row['err_dq_kernel_vs_fp64']:.3g} above the tolerance "
                             f"{row['tolerance_dq']:.3g}")
    assert 2 * row["err_dq_torch_vs_fp64"] < row["err_dq_kernel_vs_fp64"] < 3 * row["err_dq_torch_vs_fp64"]

