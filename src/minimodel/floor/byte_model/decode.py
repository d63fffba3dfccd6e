"""The closed-form byte model of decode: a few new query tokens against a long KV cache, as
`forward` is the forward's (a per-step list of the reads and writes that cross the slow-memory
boundary, summed with sympy; stage 1 writes it as tables, `minimodel.symbolic`).

The shapes, in FlashAttention's `flash_attn_with_kvcache` layout: Q and O are (B, L_q, H_q, d),
the caches (B, L_cache, H_kv, d) with H_q a multiple of H_kv (grouped-query attention: each KV
head serves g = H_q / H_kv query heads). Sequence b of the batch holds `cache_seqlens[b]` keys
(its new tokens' keys included); query i of L_q attends to keys 0 … seqlen − L_q + i. Only the
sum of the lengths matters to the bytes: T = Σ_b cache_seqlens[b] (B·L when every sequence has L).

- **Naive** (`contract.NAIVE_SCHEME`, `naive_transfers`): PyTorch's three steps per sequence, the
  scores of every head materialized: S = scale · Q Kᵀ (the query heads of a KV head multiply its
  K in one batched matmul, so K is read once), the mask among the new tokens when L_q > 1 (one
  more pass over S), P = softmax(S), O = P V. S and P are in the inputs' dtype (a GPU's softmax
  computes in fp32 in registers).
- **Split-KV** (`contract.SPLIT_KV_SCHEME`, `split_kv_transfers`; FlashDecoding, the kernel's
  scheme): programs over (sequence, KV head, split), every query head of a KV head packed in one
  tile, so each KV tile is read once for the group; each program streams its split's K and V
  past the online softmax. With one split it writes O itself. With S > 1 splits each program
  writes its partial output and log-sum-exp in fp32 (every split, an empty one too: O = 0 and
  LSE = −∞) and a combine step reads them back and writes O.

Every transfer is counted, the write of O included (decode has no lab convention to follow).
`cache_seqlens` itself (4 bytes a sequence) is left out. FLOPs count the two matmuls over the
keys each query sees: 4·H_q·d·(L_q·T − B·L_q·(L_q − 1)/2). Decode's intensity is about
2·g·L_q / dtype_bytes FLOP per byte, far under any GPU's ridge point: the time is bounded below
by bytes ÷ bandwidth (`bound_seconds`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

import sympy as sp

from minimodel.floor.byte_model.forward import Transfer, d, dtype_bytes
from minimodel.floor.contract import NAIVE_SCHEME, SPLIT_KV_SCHEME

B, H_q, H_kv, L_q, T, S = sp.symbols("B H_q H_kv L_q T S", positive=True)
SYMBOLS = (B, H_q, H_kv, L_q, T, d, dtype_bytes, S)
F32 = sp.Integer(4)  # the split-KV partial outputs and log-sum-exps
SCHEMES = (NAIVE_SCHEME, SPLIT_KV_SCHEME)


def naive_transfers(masked: bool) -> list[Transfer]:
    """PyTorch's naive decode (module docstring); `masked`: L_q > 1, the mask's pass over S."""
    scores = H_q * L_q * T
    steps = [
        Transfer("1: S = scale Q K^T", "Q", "R", B * L_q * H_q * d),
        Transfer("1: S = scale Q K^T", "K", "R", T * H_kv * d),
        Transfer("1: S = scale Q K^T", "S", "W", scores),
    ]
    if masked:
        steps += [Transfer("1b: mask the new tokens' future", "S", "R", scores),
                  Transfer("1b: mask the new tokens' future", "S", "W", scores)]
    return steps + [
        Transfer("2: P = softmax(S)", "S", "R", scores),
        Transfer("2: P = softmax(S)", "P", "W", scores),
        Transfer("3: O = P V", "P", "R", scores),
        Transfer("3: O = P V", "V", "R", T * H_kv * d),
        Transfer("3: O = P V", "O", "W", B * L_q * H_q * d),
    ]


def split_kv_transfers(combined: bool) -> list[Transfer]:
    """The split-KV decode (module docstring); `combined`: S > 1 splits and the combine step."""
    rows = B * L_q * H_q  # one output row per (sequence, new token, query head)
    steps = [
        Transfer("1: load Q (each query head once)", "Q", "R", rows * d),
        Transfer("1: load K tiles (once per KV head: the group packed)", "K", "R", T * H_kv * d),
        Transfer("1: load V tiles (once per KV head: the group packed)", "V", "R", T * H_kv * d),
    ]
    if not combined:
        return steps + [Transfer("1: store O", "O", "W", rows * d)]
    return steps + [
        Transfer("1: store each split's partial O (fp32)", "O_split", "W", S * rows * d, F32),
        Transfer("1: store each split's LSE (fp32)", "LSE_split", "W", S * rows, F32),
        Transfer("2: combine: load the partial O", "O_split", "R", S * rows * d, F32),
        Transfer("2: combine: load the LSEs", "LSE_split", "R", S * rows, F32),
        Transfer("2: combine: store O", "O", "W", rows * d),
    ]


def transfers(scheme: str, len_q: int = 1, splits: int = 1) -> list[Transfer]:
    """The transfers of `scheme` at a query length and split count (which steps exist)."""
    if scheme == NAIVE_SCHEME:
        return naive_transfers(masked=len_q > 1)
    if scheme == SPLIT_KV_SCHEME:
        return split_kv_transfers(combined=splits > 1)
    raise ValueError(f"unknown decode scheme {scheme!r}; accepted: {', '.join(SCHEMES)}")


@cache
def derived_bytes(scheme: str, masked_or_combined: bool) -> sp.Expr:
    """Total slow-memory bytes: the naive scheme with or without the mask's pass (L_q > 1), the
    split-KV one with one split or with the combine (S > 1)."""
    steps = transfers(scheme, len_q=2 if masked_or_combined else 1, splits=2 if masked_or_combined else 1)
    return sp.factor(sp.simplify(sum(t.bytes for t in steps)))


@cache
def _numeric(expr: sp.Expr):
    return sp.lambdify(SYMBOLS, expr, "math")


def check_shape(batch: int, heads_q: int, heads_kv: int, len_q: int, cache_seqlens: Sequence[int],
                head_dim: int, dtype_bytes: int, splits: int) -> None:
    """One ValueError naming the first argument that is wrong and what is accepted."""
    for name, value in (("batch", batch), ("heads_q", heads_q), ("heads_kv", heads_kv), ("len_q", len_q),
                        ("head_dim", head_dim), ("dtype_bytes", dtype_bytes), ("splits", splits)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive whole number, got {value!r}")
    if heads_q % heads_kv:
        raise ValueError(f"heads_q ({heads_q}) must be a multiple of heads_kv ({heads_kv})")
    if len(cache_seqlens) != batch:
        raise ValueError(f"cache_seqlens has {len(cache_seqlens)} entries for a batch of {batch}")
    short = [n for n in cache_seqlens if n < len_q]
    if short:
        raise ValueError(f"every cache_seqlens entry must be at least len_q ({len_q}) (the cache holds the "
                         f"new tokens' keys); got {short[0]}")


def _values(batch, heads_q, heads_kv, len_q, cache_seqlens, head_dim, dtype_bytes, splits):
    check_shape(batch, heads_q, heads_kv, len_q, cache_seqlens, head_dim, dtype_bytes, splits)
    return (batch, heads_q, heads_kv, len_q, sum(cache_seqlens), head_dim, dtype_bytes, splits)


def bytes_by_rw(scheme: str, batch: int, heads_q: int, heads_kv: int, len_q: int,
                cache_seqlens: Sequence[int], head_dim: int, dtype_bytes: int = 2,
                splits: int = 1) -> dict[str, float]:
    """Bytes read ("R") and written ("W") by one decode call of `scheme`."""
    values = _values(batch, heads_q, heads_kv, len_q, cache_seqlens, head_dim, dtype_bytes, splits)
    steps = transfers(scheme, len_q, splits)
    return {rw: float(_numeric(sum((t.bytes for t in steps if t.direction == rw), sp.Integer(0)))(*values))
            for rw in ("R", "W")}


def model_bytes(scheme: str, batch: int, heads_q: int, heads_kv: int, len_q: int,
                cache_seqlens: Sequence[int], head_dim: int, dtype_bytes: int = 2, splits: int = 1) -> float:
    """Slow-memory bytes of one decode call of `scheme` (module docstring)."""
    rw = bytes_by_rw(scheme, batch, heads_q, heads_kv, len_q, cache_seqlens, head_dim, dtype_bytes, splits)
    return rw["R"] + rw["W"]


def kv_cache_bytes(batch: int, heads_kv: int, kv_len: int, head_dim: int, dtype_bytes: int = 2) -> int:
    """Bytes of a K and a V cache of `kv_len` positions: what a point allocates, and what the
    config's cap bounds."""
    return 2 * batch * kv_len * heads_kv * head_dim * dtype_bytes


def flops(heads_q: int, len_q: int, cache_seqlens: Sequence[int], head_dim: int) -> float:
    """FLOPs of Q Kᵀ and P V over the keys each query sees: 4·H_q·d·Σ_b (L_q·L_b − L_q(L_q − 1)/2)."""
    seen = sum(len_q * n - len_q * (len_q - 1) // 2 for n in cache_seqlens)
    return float(4 * heads_q * head_dim * seen)


def intensity(scheme: str, batch: int, heads_q: int, heads_kv: int, len_q: int, cache_seqlens: Sequence[int],
              head_dim: int, dtype_bytes: int = 2, splits: int = 1) -> float:
    """FLOP per slow-memory byte."""
    return flops(heads_q, len_q, cache_seqlens, head_dim) / model_bytes(
        scheme, batch, heads_q, heads_kv, len_q, cache_seqlens, head_dim, dtype_bytes, splits)


def bound_seconds(model_bytes_: float, bandwidth_bytes_per_s: float) -> float:
    """The least time a call can take: its bytes ÷ the memory bandwidth (decode's roofline)."""
    if bandwidth_bytes_per_s <= 0:
        raise ValueError(f"bandwidth must be positive, got {bandwidth_bytes_per_s!r}")
    return model_bytes_ / bandwidth_bytes_per_s
