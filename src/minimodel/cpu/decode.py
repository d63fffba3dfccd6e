"""Decode's measured byte traffic (stage 2): the naive decode (`floor.decode_ref.naive_decode`) and
a split-KV reference, counted by `minimodel.cpu.slow_memory`, beside `byte_model.decode`.

`split_kv_decode_reference` is the kernel's schedule (`minimodel.kernel.decode`) in plain PyTorch:
for each (sequence, KV head) the g·L_q query rows of the group are loaded once; each split's K
and V tiles stream past them (online softmax in fp32); with one split the result is O, with more
each split's partial output and base-2 log-sum-exp go to slow memory (`o_part`, `lse_part`) and
a combine step per (sequence, query head) reads them back and writes O. Tiles are "loaded" with
an explicit copy, so that each crossing of the slow-memory boundary is one op.

Every byte is counted, O's write included, as the model counts them. The inputs, O and the split
partials are in slow memory; the scores and tiles, under the on-chip budget, are not. The naive
reference's scores are slow-memory traffic only where a sequence's S (H_q × L_q × its length) is
larger than the budget: the grid's points are (`decode.cpu`: 4096 keys and more at 32 heads).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import torch
from tqdm import tqdm

from minimodel.cpu.slow_memory import THEORY_SRAM_BYTES, ByteCounter
from minimodel.floor import decode_grid
from minimodel.floor.attention_ref import softmax_scale
from minimodel.floor.byte_model import decode as model
from minimodel.floor.contract import NAIVE_SCHEME, SPLIT_KV_SCHEME
from minimodel.floor.decode_ref import check_decode, future_mask, naive_decode

log = logging.getLogger(__name__)
SCHEMES = (NAIVE_SCHEME, SPLIT_KV_SCHEME)


def _load(view: torch.Tensor) -> torch.Tensor:
    """One tile from slow memory into a fresh fp32 buffer: one read of the tile."""
    return view.to(dtype=torch.float32, copy=True)


def split_ranges(seqlen: int, splits: int, block_n: int) -> list[tuple[int, int]]:
    """Each split's keys [start, end): whole tiles, as even a share as can be (the kernel's cut)."""
    per = math.ceil(math.ceil(seqlen / block_n) / splits) * block_n
    return [(min(s * per, seqlen), min((s + 1) * per, seqlen)) for s in range(splits)]


def split_kv_decode_reference(q, k_cache, v_cache, cache_seqlens: Sequence[int], out, o_part, lse_part,
                              splits: int, block_n: int = 64, sm_scale: float | None = None) -> torch.Tensor:
    """The split-KV decode into `out` (q's shape); `o_part` (B, H_q, L_q, splits, d) and `lse_part`
    (B, H_q, L_q, splits), fp32, hold the splits' partials when `splits` > 1 (module docstring)."""
    check_decode(q, k_cache, v_cache, cache_seqlens)
    _, len_q, heads_q, d = q.shape
    heads_kv = k_cache.shape[2]
    group = heads_q // heads_kv
    scale = softmax_scale(d, sm_scale) * 1.4426950408889634  # base 2, as the kernel
    for b, n in enumerate(cache_seqlens):
        for h in range(heads_kv):
            heads = slice(h * group, (h + 1) * group)
            # rows head-major, each head's L_q tokens: (g·L_q, d)
            qg = _load(q[b, :, heads, :].permute(1, 0, 2)).reshape(group * len_q, d)
            for s, (start, end) in enumerate(split_ranges(n, splits, block_n)):
                o, lse = _split(qg, k_cache[b, :, h], v_cache[b, :, h], start, end, n, len_q, scale, block_n)
                if splits == 1:
                    out[b, :, heads, :] = o.view(group, len_q, d).permute(1, 0, 2).to(out.dtype)
                else:
                    o_part[b, heads, :, s, :] = o.view(group, len_q, d)
                    lse_part[b, heads, :, s] = lse.view(group, len_q)
    if splits > 1:
        for b in range(len(cache_seqlens)):
            for hq in range(heads_q):
                part, lse = _load(o_part[b, hq]), _load(lse_part[b, hq])  # (L_q, splits, d), (L_q, splits)
                weight = torch.exp2(lse - lse.amax(dim=-1, keepdim=True))
                o = (part * weight[..., None]).sum(dim=1) / weight.sum(dim=-1, keepdim=True)
                out[b, :, hq, :] = o.to(out.dtype)
    return out


def _split(qg, k, v, start: int, end: int, seqlen: int, len_q: int, scale: float, block_n: int):
    """One split's online softmax over keys [start, end) of one KV head: (O, base-2 LSE) of its
    rows, O = 0 and LSE = −∞ where a row saw no key."""
    rows = qg.shape[0]
    acc = torch.zeros_like(qg)
    m = torch.full((rows,), float("-inf"))
    ell = torch.zeros(rows)
    for j0 in range(start, end, block_n):
        j1 = min(j0 + block_n, end)
        kt, vt = _load(k[j0:j1]), _load(v[j0:j1])
        s = qg @ kt.T
        if j1 > seqlen - len_q + 1:  # only the last tile holds keys a new token may not see yet
            s = s.masked_fill(future_mask(rows, len_q, seqlen)[:, j0:j1], float("-inf"))
        m_new = torch.maximum(m, s.amax(dim=-1))
        m_sub = torch.where(m_new == float("-inf"), 0.0, m_new)
        p = torch.exp2((s - m_sub[:, None]) * scale)
        alpha = torch.exp2((m - m_sub) * scale)  # rescales what was summed under the old maximum
        ell = alpha * ell + p.sum(dim=-1)
        acc = alpha[:, None] * acc + p @ vt
        m = m_new
    seen = ell > 0
    o = acc / torch.where(seen, ell, 1.0)[:, None]
    lse = torch.where(seen, m * scale + torch.log2(torch.where(seen, ell, 1.0)), float("-inf"))
    return o, lse


def measure(point: decode_grid.DecodePoint, scheme: str, splits: int = 1, block_n: int = 64,
            sram_bytes: int = THEORY_SRAM_BYTES, random_seed: int = 0) -> dict:
    """Bytes of one scheme at one decode point, counted and set beside the model."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown decode scheme {scheme!r}; accepted: {', '.join(SCHEMES)}")
    gen = torch.Generator().manual_seed(random_seed)
    dtype = getattr(torch, point.dtype)
    shape_q = (point.batch, point.len_q, point.heads_q, point.head_dim)
    shape_kv = (point.batch, point.kv_len, point.heads_kv, point.head_dim)
    q, k, v = (torch.randn(s, generator=gen).to(dtype) for s in (shape_q, shape_kv, shape_kv))
    lengths = list(point.cache_seqlens)
    counter = ByteCounter(sram_bytes)
    if scheme == NAIVE_SCHEME:
        splits = 1
        # the count does not depend on values: the naive matmuls run on the meta device (shapes only)
        wrapped = [counter.wrap(t.to("meta")) for t in (q, k, v, torch.empty_like(q))]
        naive_decode(*wrapped[:3], lengths, out=wrapped[3])
    else:
        partial = (point.batch, point.heads_q, point.len_q, splits)
        buffers = (torch.empty_like(q), torch.empty(*partial, point.head_dim), torch.empty(*partial))
        wrapped = [counter.wrap(t) for t in (q, k, v, *buffers)]
        split_kv_decode_reference(*wrapped[:3], lengths, *wrapped[3:], splits=splits, block_n=block_n)
    bytes_model = model.model_bytes(scheme, point.batch, point.heads_q, point.heads_kv, point.len_q, lengths,
                                    point.head_dim, point.dtype_bytes, splits)
    counted = counter.reads + counter.writes
    return {**point.row(), "scheme": scheme, "splits": splits, "block_n": block_n, "sram_bytes": sram_bytes,
            "bytes_model": bytes_model, "bytes_instrumented": counted, "bytes_read": counter.reads,
            "bytes_written": counter.writes, "deviation": (counted - bytes_model) / bytes_model}


def sweep(points: Sequence[decode_grid.DecodePoint], splits: Sequence[int], block_n: int = 64,
          sram_bytes: int = THEORY_SRAM_BYTES, random_seed: int = 0, progress=None) -> list[dict]:
    """The naive decode, then the split-KV reference at each split count, at every point."""
    plan = [(p, NAIVE_SCHEME, 1) for p in points] + [(p, SPLIT_KV_SCHEME, s) for p in points for s in splits]
    rows = []
    for point, scheme, n_splits in tqdm(plan, desc="cpu decode bytes", file=progress, mininterval=2):
        rows.append(measure(point, scheme, n_splits, block_n, sram_bytes, random_seed))
        log.info("cpu decode %s splits=%d %s: deviation %.3g", scheme, n_splits, point, rows[-1]["deviation"])
    return rows
