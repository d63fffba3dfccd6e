"""Decode's byte model (stage 1): its closed forms against hand counts."""

import pytest
import sympy as sp

from minimodel.floor import contract
from minimodel.floor.byte_model import decode
from minimodel.floor.byte_model.decode import B, H_kv, H_q, L_q, S, T
from minimodel.floor.byte_model.forward import d, dtype_bytes

NAIVE, SPLIT = contract.NAIVE_SCHEME, contract.SPLIT_KV_SCHEME


def test_the_closed_forms_are_the_hand_counts():
    qo = 2 * B * L_q * H_q * d * dtype_bytes  # Q read, O written
    kv = 2 * T * H_kv * d * dtype_bytes  # the cache read once per KV head
    assert sp.simplify(decode.derived_bytes(SPLIT, False) - (qo + kv)) == 0
    partials = 2 * S * B * L_q * H_q * (d + 1) * 4  # written, then read by the combine
    assert sp.simplify(decode.derived_bytes(SPLIT, True) - (qo + kv + partials)) == 0
    scores = H_q * L_q * T * dtype_bytes  # S or P of every head once
    assert sp.simplify(decode.derived_bytes(NAIVE, False) - (qo + kv + 4 * scores)) == 0
    assert sp.simplify(decode.derived_bytes(NAIVE, True) - (qo + kv + 6 * scores)) == 0


def test_llama3_8b_at_one_token_reads_its_cache_once():
    # batch 1, 32 query / 8 KV heads, d = 128, 131072 keys, fp16: the K and V caches are 512 MiB
    seqlens = [131072]
    cache = decode.kv_cache_bytes(1, 8, 131072, 128, 2)
    assert cache == 2 * 131072 * 8 * 128 * 2 == 512 * 2**20
    one = decode.model_bytes(SPLIT, 1, 32, 8, 1, seqlens, 128, 2, splits=1)
    assert one == cache + 2 * 32 * 128 * 2
    sixteen = decode.model_bytes(SPLIT, 1, 32, 8, 1, seqlens, 128, 2, splits=16)
    assert sixteen - one == 2 * 16 * 32 * (128 + 1) * 4  # the partials, out and back in
    rw = decode.bytes_by_rw(SPLIT, 1, 32, 8, 1, seqlens, 128, 2, splits=16)
    assert rw["W"] == 16 * 32 * 129 * 4 + 32 * 128 * 2
    # the bound: 512 MiB at 4 TB/s is 134 µs
    assert decode.bound_seconds(one, 4e12) == pytest.approx(one / 4e12)


def test_ragged_lengths_count_their_sum():
    ragged = decode.model_bytes(NAIVE, 3, 8, 2, 4, [4, 100, 1000], 64, 2)
    hand = (2 * 3 * 4 * 8 * 64 + 2 * 1104 * 2 * 64 + 6 * 8 * 4 * 1104) * 2
    assert ragged == hand
    assert ragged == decode.model_bytes(NAIVE, 3, 8, 2, 4, [368, 368, 368], 64, 2)


def test_flops_count_the_keys_each_new_token_sees():
    # one token sees every key; four tokens see L-3, L-2, L-1, L keys
    assert decode.flops(32, 1, [1000], 128) == 4 * 32 * 128 * 1000
    assert decode.flops(2, 4, [10, 4], 64) == 4 * 2 * 64 * ((7 + 8 + 9 + 10) + (1 + 2 + 3 + 4))
    # intensity about 2·g·L_q / dtype_bytes: 4 FLOP/B for g = 4, one fp16 token, on a long cache
    assert decode.intensity(SPLIT, 1, 32, 8, 1, [131072], 128, 2) == pytest.approx(4, rel=1e-3)


@pytest.mark.parametrize(("args", "says"), [
    ((1, 32, 6, 1, [10], 64), "heads_q (32) must be a multiple of heads_kv (6)"),
    ((2, 32, 8, 1, [10], 64), "cache_seqlens has 1 entries for a batch of 2"),
    ((1, 32, 8, 4, [3], 64), "at least len_q (4)"),
    ((1, 32, 8, 0, [3], 64), "len_q must be a positive whole number, got 0"),
])
def test_bad_shapes_are_refused_naming_what_is_wrong(args, says):
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        decode.model_bytes(SPLIT, *args)
    with pytest.raises(ValueError, match="unknown decode scheme 'flash'"):
        decode.transfers("flash")
