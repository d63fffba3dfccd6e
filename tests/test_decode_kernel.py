"""The split-KV decode kernel against float64: on a CUDA device when there is one, else under
Triton's CPU interpreter (float16 there: bf16 dots are wrong under it).

The rule is the project's (minimodel.floor.correctness_rule): err_kernel <= max(1e-3, 2 × err_torch),
err_torch being PyTorch's own naive decode in the inputs' dtype, both against float64.
"""

import pytest
import torch
from conftest import DEVICE, HAS_CUDA

from minimodel.floor import decode_grid
from minimodel.floor.correctness_rule import tolerance
from minimodel.floor.decode_ref import naive_decode
from minimodel.kernel import decode
from minimodel.kernel.decode import flash_decode, get_decode_config

BF16_SKIP = pytest.mark.skipif(not HAS_CUDA, reason=decode.contract.BF16_INTERPRETER_REASON)


def inputs(batch, len_q, heads_q, heads_kv, d, cache_len, dtype="float16", gen=None):
    dt = getattr(torch, dtype)
    q = torch.randn(batch, len_q, heads_q, d, generator=gen).to(DEVICE, dt)
    k, v = (torch.randn(batch, cache_len, heads_kv, d, generator=gen).to(DEVICE, dt) for _ in range(2))
    return q, k, v


def check(batch, len_q, heads_q, heads_kv, d, seqlens, splits, dtype="float16", gen=None, cache_len=None):
    q, k, v = inputs(batch, len_q, heads_q, heads_kv, d, cache_len or max(seqlens), dtype, gen)
    lengths = torch.tensor(seqlens, dtype=torch.int32, device=DEVICE)
    out, cfg = flash_decode(q, k, v, lengths, num_splits=splits, return_config=True)
    exact = naive_decode(q, k, v, seqlens, upcast=True)
    err = (out.double() - exact).abs().max().item()
    err_torch = (naive_decode(q, k, v, seqlens).double() - exact).abs().max().item()
    print(f"B={batch} L_q={len_q} H={heads_q}/{heads_kv} d={d} seqlens={seqlens} splits={cfg.splits} "
          f"{dtype}: kernel {err:.2e} torch {err_torch:.2e} tolerance {tolerance(err_torch):.2e}")
    assert out.shape == q.shape and out.dtype == q.dtype and cfg.splits == splits
    assert not torch.isnan(out).any()
    assert err <= tolerance(err_torch)
    return out


# (L_q, KV length, group): every length the issue names (L_q = 4 from its least length, 4) at every
# group, but 4096 keys at group 4 only (the interpreter's time)
CASES = [(len_q, kv_len, group) for len_q, kv_len in
         [(1, 1), (1, 77), (1, 1000), (1, 4096), (4, 4), (4, 77), (4, 1000), (4, 4096)]
         for group in (1, 4, 8) if kv_len != 4096 or group == 4]


@pytest.mark.parametrize(("len_q", "kv_len", "group"), CASES)
@pytest.mark.parametrize("splits", [1, 5])
def test_matches_float64_at_every_length_group_and_split(gen, len_q, kv_len, group, splits):
    check(1, len_q, group, 1, 64, [kv_len], splits, gen=gen)


@pytest.mark.parametrize("len_q", [1, 4])
@pytest.mark.parametrize("splits", [1, 3, 16])
def test_ragged_lengths_down_to_the_query_length(gen, len_q, splits):
    # one sequence at the least length allowed, one past a tile, one mid-tile; the cache longer
    # than every one of them, and more splits than the short ones have tiles (empty splits)
    check(3, len_q, 8, 2, 128, [len_q, 130, 1000], splits, gen=gen, cache_len=1100)


@pytest.mark.parametrize("d", decode.SUPPORTED_HEAD_DIMS)
def test_every_head_dim(gen, d):
    check(2, 4, 4, 2, d, [300, 77], 2, gen=gen)


@BF16_SKIP
def test_bfloat16(gen):
    check(2, 4, 8, 2, 128, [1000, 77], 4, "bfloat16", gen=gen)


def test_a_strided_query_is_read_through_its_strides(gen):
    # q a slice of a wider tensor (B, L_q, H, 2d)[..., :d]: rows not contiguous, the last dim is
    q_wide = torch.randn(2, 4, 8, 128, generator=gen).to(DEVICE, torch.float16)
    q = q_wide[..., :64]
    _, k, v = inputs(2, 4, 8, 2, 64, 200, gen=gen)
    lengths = torch.tensor([200, 9], dtype=torch.int32, device=DEVICE)
    got = flash_decode(q, k, v, lengths, num_splits=3)
    assert torch.allclose(got, flash_decode(q.contiguous(), k, v, lengths, num_splits=3))


def test_the_policy_splits_when_the_programs_leave_sms_idle():
    # Llama-3-8B at batch 1: 8 programs for 132 SMs, a long cache: 16 splits of 8192 keys
    assert get_decode_config(1, 8, 131072, 128, 132).splits == 16
    # batch 64 × 8 KV heads fill the SMs: one split, no combine
    assert get_decode_config(64, 8, 131072, 128, 132).splits == 1
    # a short cache is not cut below MIN_KEYS_PER_SPLIT keys a split
    assert get_decode_config(1, 8, 1024, 128, 132).splits == 1024 // decode_grid.MIN_KEYS_PER_SPLIT
    cfg = get_decode_config(1, 8, 1024, 128, 132, splits=7)
    assert cfg.splits == 7 and cfg.as_row()["cfg_sm_count"] == 132
    with pytest.raises(ValueError, match="num_splits must be a positive whole number"):
        get_decode_config(1, 8, 1024, 128, 132, splits=0)


def _lengths(*values):
    return torch.tensor(values, dtype=torch.int32, device=DEVICE)


@pytest.mark.parametrize(("change", "error", "says"), [
    (lambda q, k, v, s: (q, k, v, _lengths(40, 51)), ValueError,
     "cache_seqlens[1] = 51 exceeds the cache's length 50"),
    (lambda q, k, v, s: (q, k, v, _lengths(40, 3)), ValueError,
     "cache_seqlens[1] = 3 is below the query length 4"),
    (lambda q, k, v, s: (q[:, :, :7], k, v, s), ValueError,
     "q's heads (7) must be a multiple of the caches' heads (2)"),
    (lambda q, k, v, s: (q[..., :32], k[..., :32], v[..., :32], s), ValueError,
     "head dim 32 is not supported"),
    (lambda q, k, v, s: (q, k.float(), v, s), TypeError, "q, k_cache, v_cache must share one dtype"),
    (lambda q, k, v, s: (q.float(), k, v, s), TypeError, "q has dtype torch.float32; accepted"),
    (lambda q, k, v, s: (q, k, v, s.long()), TypeError, "cache_seqlens must be a 1-D torch.int32 tensor"),
    (lambda q, k, v, s: (q, k, v, s.to("meta")), ValueError, "must be on one device"),
    (lambda q, k, v, s: (q, k, v, s[:1]), ValueError,
     "cache_seqlens must have one entry per sequence (2), got 1"),
])
def test_bad_input_is_refused_in_one_line(gen, change, error, says):
    q, k, v = inputs(2, 4, 8, 2, 64, 50, gen=gen)
    with pytest.raises(error) as caught:
        flash_decode(*change(q, k, v, _lengths(40, 50)))
    message = str(caught.value)
    print(message)
    assert says in message and "\n" not in message


@pytest.mark.skipif(HAS_CUDA, reason="checks the interpreter")
def test_bfloat16_is_refused_under_the_interpreter(gen):
    q, k, v = (t.bfloat16() for t in inputs(1, 1, 2, 1, 64, 8, gen=gen))
    with pytest.raises(TypeError, match="refused under Triton's interpreter: tl.dot on bf16"):
        flash_decode(q, k, v, _lengths(8))


def test_a_given_max_seqlen_is_checked_against_the_cache(gen):
    q, k, v = inputs(1, 1, 2, 1, 64, 8, gen=gen)
    with pytest.raises(ValueError, match="exceeds the cache's length 8"):
        flash_decode(q, k, v, _lengths(8), max_seqlen=9)
    assert torch.equal(flash_decode(q, k, v, _lengths(8), max_seqlen=8, num_splits=1),
                       flash_decode(q, k, v, _lengths(8), num_splits=1))
