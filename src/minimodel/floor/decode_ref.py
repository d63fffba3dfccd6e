"""Decode's naive attention, on the floor below the stages: the float64 reference every decode
check compares with (`upcast=True`), the CPU stage's instrumented naive decode, and the GPU
stage's naive contender.

Shapes as FlashAttention's `flash_attn_with_kvcache` takes them (`byte_model.decode`): q (B, L_q,
H_q, d), the caches (B, L_cache, H_kv, d), `cache_seqlens` the number of valid keys of each
sequence (its new tokens' keys included); query i of L_q attends to keys 0 … seqlen − L_q + i.

`naive_decode` runs sequence by sequence (the lengths differ), one step per line of
`byte_model.decode.naive_transfers`: the g = H_q / H_kv query heads of a KV head are the rows of
one batched matmul against that head's keys, read in place from the cache (a view, not a copy).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from minimodel.floor.attention_ref import softmax_scale


def check_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 cache_seqlens: Sequence[int]) -> None:
    """The shapes `naive_decode` and the decode kernel agree on, or one ValueError saying which
    is wrong and what is accepted (the lengths as host integers: the kernel checks its tensor)."""
    if q.dim() != 4 or k_cache.dim() != 4:
        raise ValueError(f"q must be (B, L_q, H_q, d) and the caches (B, L_cache, H_kv, d); got shapes "
                         f"{tuple(q.shape)}, {tuple(k_cache.shape)}")
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"k_cache and v_cache must have one shape, got {tuple(k_cache.shape)} and "
                         f"{tuple(v_cache.shape)}")
    (b, len_q, heads_q, d), (bk, len_cache, heads_kv, dk) = q.shape, k_cache.shape
    if (bk, dk) != (b, d):
        raise ValueError(f"the caches must be (B, L_cache, H_kv, d) = ({b}, L_cache, H_kv, {d}) to match q "
                         f"{tuple(q.shape)}, got {tuple(k_cache.shape)}")
    if heads_kv == 0 or heads_q % heads_kv:
        raise ValueError(f"q's heads ({heads_q}) must be a multiple of the caches' heads ({heads_kv})")
    if len(cache_seqlens) != b:
        raise ValueError(f"cache_seqlens must have one entry per sequence ({b}), got {len(cache_seqlens)}")
    for i, n in enumerate(cache_seqlens):
        if n > len_cache:
            raise ValueError(f"cache_seqlens[{i}] = {n} exceeds the cache's length {len_cache}")
        if n < len_q:
            raise ValueError(f"cache_seqlens[{i}] = {n} is below the query length {len_q}: the cache holds "
                             "the new tokens' keys, so every length must be at least L_q")


def future_mask(rows: int, len_q: int, seqlen: int, device=None) -> torch.Tensor:
    """True where a row may not see a key: row r is new token i = r mod L_q, which sees keys
    0 … seqlen − L_q + i (the rows of a KV head's group, head by head, each its L_q tokens)."""
    token = torch.arange(rows, device=device)[:, None] % len_q
    key = torch.arange(seqlen, device=device)[None, :]
    return key > seqlen - len_q + token


def naive_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_seqlens: Sequence[int],
                 sm_scale: float | None = None, upcast: bool = False, out: torch.Tensor | None = None
                 ) -> torch.Tensor:
    """softmax(scale · Q Kᵀ, the new tokens' future masked) V, sequence by sequence, in the inputs'
    dtype, or float64 with `upcast`. `out` (q's shape) receives the result when given (the CPU
    stage passes one that lives in slow memory)."""
    cache_seqlens = [int(n) for n in cache_seqlens]
    check_decode(q, k_cache, v_cache, cache_seqlens)
    _, len_q, heads_q, d = q.shape
    heads_kv = k_cache.shape[2]
    group = heads_q // heads_kv
    scale = softmax_scale(d, sm_scale)
    work = torch.float64 if upcast else q.dtype
    if out is None:
        out = torch.empty(q.shape, dtype=work, device=q.device)
    for b, n in enumerate(cache_seqlens):
        # (H_kv, g·L_q, d): a KV head's query heads, each its L_q tokens (a copy only when L_q > 1)
        qg = q[b].view(len_q, heads_kv, group, d).permute(1, 2, 0, 3).reshape(heads_kv, group * len_q, d)
        k = k_cache[b, :n].permute(1, 2, 0)  # (H_kv, d, n), read in place
        v = v_cache[b, :n].permute(1, 0, 2)  # (H_kv, n, d)
        if upcast:
            qg, k, v = qg.double(), k.double(), v.double()
        s = torch.baddbmm(torch.empty(heads_kv, group * len_q, n, dtype=work, device=q.device), qg, k,
                          beta=0, alpha=scale)
        if len_q > 1:
            s = s.masked_fill(future_mask(group * len_q, len_q, n, q.device), float("-inf"))
        p = torch.softmax(s, dim=-1)
        o = torch.bmm(p, v)
        out[b] = o.view(heads_kv, group, len_q, d).permute(2, 0, 1, 3).reshape(len_q, heads_q, d)
    return out
