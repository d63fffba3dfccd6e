import pytest
import torch

from minimodel.cpu.references import attn_flash_reference_cpu
from minimodel.floor.attention_ref import attn_naive, reference_attn


def rand(gen, *shape, dtype=torch.float32):
    return torch.randn(*shape, generator=gen).to(dtype)


@pytest.mark.parametrize("n", [1, 2, 63, 64, 77, 129, 1000])
@pytest.mark.parametrize("d", [16, 64, 80])
@pytest.mark.parametrize("causal", [False, True])
def test_three_references_agree_in_fp32(gen, n, d, causal):
    Q, K, V = (rand(gen, 2, n, d) for _ in range(3))
    exact = reference_attn(Q, K, V, causal=causal, upcast=True)
    outs = {
        "reference": reference_attn(Q, K, V, causal=causal),
        "naive": attn_naive(Q, K, V, causal=causal),
        "flash": attn_flash_reference_cpu(Q, K, V, 64, 64, causal=causal),
        "flash_odd_tiles": attn_flash_reference_cpu(Q, K, V, 48, 16, causal=causal),
    }
    for name, out in outs.items():
        err = (out.double() - exact).abs().max().item()
        print(name, err)
        assert err < 1e-5, name
        assert out.shape == Q.shape and out.dtype == Q.dtype


def test_flash_reference_in_fp16_matches_within_fp16_rounding(gen):
    Q, K, V = (rand(gen, 300, 64, dtype=torch.float16) for _ in range(3))
    exact = reference_attn(Q, K, V, causal=True, upcast=True)
    err_flash = (attn_flash_reference_cpu(Q, K, V, causal=True).double() - exact).abs().max()
    err_torch = (reference_attn(Q, K, V, causal=True).double() - exact).abs().max()
    print(err_flash.item(), err_torch.item())
    assert err_flash <= 2 * err_torch + 1e-4


def test_causal_first_row_sees_only_itself(gen):
    Q, K, V = (rand(gen, 5, 8) for _ in range(3))
    for out in (reference_attn(Q, K, V, causal=True), attn_naive(Q, K, V, causal=True),
                attn_flash_reference_cpu(Q, K, V, 2, 2, causal=True)):
        torch.testing.assert_close(out[0], V[0])


def test_reference_handles_grouped_query_heads(gen):
    Q = rand(gen, 1, 4, 33, 16)
    K, V = rand(gen, 1, 2, 33, 16), rand(gen, 1, 2, 33, 16)
    out = reference_attn(Q, K, V, causal=False)
    # query heads 0 and 1 share K/V head 0
    torch.testing.assert_close(out[:, 1], reference_attn(Q[:, 1], K[:, 0], V[:, 0], causal=False))
    with pytest.raises(ValueError, match="multiple"):
        reference_attn(Q, rand(gen, 1, 3, 33, 16), rand(gen, 1, 3, 33, 16))


def test_flash_reference_never_builds_an_n_by_n_tensor(gen):
    n = 512
    Q, K, V = (rand(gen, n, 32) for _ in range(3))
    largest = 0

    class Watch(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            nonlocal largest
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor) and out.numel() != Q.numel():
                largest = max(largest, out.numel())
            return out

    with Watch():
        attn_flash_reference_cpu(Q, K, V, 64, 64)
    assert largest <= 64 * 64


def test_bad_shapes_are_rejected(gen):
    with pytest.raises(ValueError, match="equal shapes"):
        attn_naive(rand(gen, 4, 8), rand(gen, 4, 8), rand(gen, 5, 8))
    with pytest.raises(ValueError, match="rank"):
        attn_flash_reference_cpu(rand(gen, 4), rand(gen, 4), rand(gen, 4))
    with pytest.raises(ValueError, match="tile sizes"):
        attn_flash_reference_cpu(rand(gen, 4, 8), rand(gen, 4, 8), rand(gen, 4, 8), 0, 4)
