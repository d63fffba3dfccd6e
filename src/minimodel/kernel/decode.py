"""Split-KV decode in Triton ("FlashDecoding"): a few new query tokens against a long KV cache,
`flash_decode(q, k_cache, v_cache, cache_seqlens)`.

Decode is its own entry point, as FlashAttention's `flash_attn_with_kvcache` is beside its
`flash_attn_func`, and not a mode of `attention`: its inputs are another layout ((B, L, H, d), a
cache longer than its valid keys, a length per sequence), its causal mask is aligned to the end
of each sequence rather than the start, it has no backward, and its schedule is another one
(programs over the KV length, not over query tiles).

Two kernels (the byte model: `floor/byte_model/decode.py`, scheme `split-kv`):
1. `_decode_split_kernel`, one program per (split, KV head, sequence): the g·L_q query rows of a
   KV head (its g = H_q / H_kv query heads, each its L_q new tokens) are one tile, so each K/V tile
   of the split is read once for the whole group; the online softmax runs over the split's keys.
   With one split it writes O; with more, its partial output and base-2 log-sum-exp in fp32.
2. `_decode_combine_kernel`, one program per output row: the splits' partial outputs weighted by
   their log-sum-exps.
Cutting the KV length across programs is what fills the GPU when B × H_kv programs would leave
most SMs idle (one sequence, 8 KV heads, 132 SMs); `get_decode_config` picks the split count.

    q = torch.randn(1, 1, 32, 128, device="cuda", dtype=torch.float16)
    k = torch.randn(1, 131072, 8, 128, device="cuda", dtype=torch.float16); v = torch.randn_like(k)
    o = flash_decode(q, k, v, torch.tensor([131072], dtype=torch.int32, device="cuda"))
"""

from __future__ import annotations

import dataclasses
import math

import torch
import triton
import triton.language as tl

from minimodel.floor import contract
from minimodel.floor.decode_grid import split_policy
from minimodel.floor.decode_ref import check_decode

SUPPORTED_HEAD_DIMS = (64, 128, 256)
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
# Triton decided when the kernels were defined (a run sets the switch first: `minimodel.entry`).
INTERPRETED = triton.knobs.runtime.interpret
# The SM count the policy assumes where there is no device to ask (under the interpreter): the H100's
# and H200's; the config records the count it was given.
DEFAULT_SMS = 132
LOG2E = 1.4426950408889634


@dataclasses.dataclass(frozen=True)
class DecodeConfig:
    """One launch's choices, recorded with every row that times or checks it."""

    splits: int
    BLOCK_N: int
    num_warps: int
    num_stages: int
    sm_count: int

    def as_row(self) -> dict:
        return {f"cfg_{k}": v for k, v in dataclasses.asdict(self).items()}


def get_decode_config(batch: int, heads_kv: int, max_seqlen: int, head_dim: int, sm_count: int = DEFAULT_SMS,
                      splits: int | None = None) -> DecodeConfig:
    """The split count (`floor.decode_grid.split_policy`, or `splits` as given) and the tile."""
    block_n = {64: 128, 128: 64, 256: 32}[head_dim]
    if splits is None:
        splits = split_policy(batch, heads_kv, max_seqlen, sm_count)
    elif not isinstance(splits, int) or isinstance(splits, bool) or splits < 1:
        raise ValueError(f"num_splits must be a positive whole number or None (the policy), got {splits!r}")
    return DecodeConfig(splits=splits, BLOCK_N=block_n, num_warps=4, num_stages=3, sm_count=sm_count)


@triton.jit
def _decode_split_kernel(Q, K, V, SEQLENS, O, O_PART, LSE_PART,
                         stride_qb, stride_qm, stride_qh, stride_kb, stride_kn, stride_kh,
                         stride_vb, stride_vn, stride_vh, stride_ob, stride_om, stride_oh,
                         heads_q, num_splits, qk_scale,
                         LEN_Q: tl.constexpr, GROUP: tl.constexpr, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, PARTIAL: tl.constexpr):
    split = tl.program_id(0)
    kv_head = tl.program_id(1)
    seq = tl.program_id(2).to(tl.int64)  # 64-bit offsets: a cache of B × L × H_kv × d passes 2³¹
    seqlen = tl.load(SEQLENS + seq)
    rows = tl.arange(0, BLOCK_M)  # row r: query head kv_head·g + r // L_q, new token r % L_q
    token = rows % LEN_Q
    head = kv_head * GROUP + rows // LEN_Q
    row_ok = rows < GROUP * LEN_Q
    dims = tl.arange(0, HEAD_DIM)
    q_ptrs = (Q + seq * stride_qb + token[:, None].to(tl.int64) * stride_qm
              + head[:, None].to(tl.int64) * stride_qh + dims[None, :])
    q = tl.load(q_ptrs, mask=row_ok[:, None], other=0.0)
    last_key = seqlen - LEN_Q + token  # the last key a row sees (causal among the new tokens)
    # the split's keys: whole tiles, as even a share of the sequence's as can be
    tiles_per_split = tl.cdiv(tl.cdiv(seqlen, BLOCK_N), num_splits)
    start = split * tiles_per_split * BLOCK_N
    end = tl.minimum(start + tiles_per_split * BLOCK_N, seqlen)
    k_base = K + seq * stride_kb + kv_head.to(tl.int64) * stride_kh
    v_base = V + seq * stride_vb + kv_head.to(tl.int64) * stride_vh
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for n0 in range(start, end, BLOCK_N):
        cols = n0 + tl.arange(0, BLOCK_N)
        col_ok = cols < end
        offs = cols[:, None].to(tl.int64)
        k = tl.load(k_base + offs * stride_kn + dims[None, :], mask=col_ok[:, None], other=0.0)
        v = tl.load(v_base + offs * stride_vn + dims[None, :], mask=col_ok[:, None], other=0.0)
        qk = tl.dot(q, tl.trans(k))
        qk = tl.where(col_ok[None, :] & (cols[None, :] <= last_key[:, None]), qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        # a row that has seen no key yet keeps m = −∞: subtract 0 there, so exp2(−∞) = 0, not NaN
        m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2((qk - m_sub[:, None]) * qk_scale)
        alpha = tl.math.exp2((m_i - m_sub) * qk_scale)  # rescales what was summed under the old maximum
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    seen = l_i > 0
    out = acc / tl.where(seen, l_i, 1.0)[:, None]
    if PARTIAL:  # an empty split writes O = 0 and LSE = −∞, which the combine weighs by 0
        part = ((seq * heads_q + head.to(tl.int64)) * LEN_Q + token) * num_splits + split
        tl.store(O_PART + part[:, None] * HEAD_DIM + dims[None, :], out, mask=row_ok[:, None])
        lse = tl.where(seen, m_i * qk_scale + tl.math.log2(tl.where(seen, l_i, 1.0)), float("-inf"))
        tl.store(LSE_PART + part, lse, mask=row_ok)
    else:
        o_ptrs = (O + seq * stride_ob + token[:, None].to(tl.int64) * stride_om
                  + head[:, None].to(tl.int64) * stride_oh + dims[None, :])
        tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=row_ok[:, None])


@triton.jit
def _decode_combine_kernel(O_PART, LSE_PART, O, stride_ob, stride_om, stride_oh, heads_q, num_splits,
                           LEN_Q: tl.constexpr, BLOCK_S: tl.constexpr, HEAD_DIM: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # (sequence, query head, new token), the partials' order
    token = row % LEN_Q
    head = (row // LEN_Q) % heads_q
    seq = row // (LEN_Q * heads_q)
    splits = tl.arange(0, BLOCK_S)
    ok = splits < num_splits
    lse = tl.load(LSE_PART + row * num_splits + splits, mask=ok, other=float("-inf"))
    top = tl.max(lse, 0)  # finite: the first split holds key 0, which every new token sees
    weight = tl.math.exp2(lse - top)
    dims = tl.arange(0, HEAD_DIM)
    part = tl.load(O_PART + (row * num_splits + splits)[:, None] * HEAD_DIM + dims[None, :],
                   mask=ok[:, None], other=0.0)
    out = tl.sum(part * weight[:, None], 0) / tl.sum(weight, 0)
    tl.store(O + seq * stride_ob + token * stride_om + head * stride_oh + dims, out.to(O.dtype.element_ty))


def validate(q, k_cache, v_cache, cache_seqlens) -> None:
    """Types, dtypes, devices and strides `flash_decode` needs, each refused in one line."""
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("cache_seqlens", cache_seqlens)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if q.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"q has dtype {q.dtype}; accepted: torch.float16, torch.bfloat16")
    if not q.dtype == k_cache.dtype == v_cache.dtype:
        raise TypeError(f"q, k_cache, v_cache must share one dtype, got {q.dtype}, {k_cache.dtype}, "
                        f"{v_cache.dtype}")
    if cache_seqlens.dtype != torch.int32 or cache_seqlens.dim() != 1:
        raise TypeError(f"cache_seqlens must be a 1-D torch.int32 tensor, got {cache_seqlens.dtype} of shape "
                        f"{tuple(cache_seqlens.shape)}")
    devices = {t.device for t in (q, k_cache, v_cache, cache_seqlens)}
    if len(devices) != 1:
        raise ValueError(f"q, k_cache, v_cache and cache_seqlens must be on one device, got "
                         f"{q.device}, {k_cache.device}, {v_cache.device}, {cache_seqlens.device}")
    if q.device.type == "cpu" and not INTERPRETED:
        raise ValueError("CPU tensors need Triton's interpreter: set TRITON_INTERPRET=1 before importing "
                         "triton, or pass CUDA tensors")
    if q.device.type not in ("cuda", "cpu"):
        raise ValueError(f"device {q.device} is not supported; accepted: cuda, or cpu under "
                         "TRITON_INTERPRET=1")
    if INTERPRETED and q.dtype == torch.bfloat16:
        raise TypeError("bfloat16 is refused under Triton's interpreter: "
                        f"{contract.BF16_INTERPRETER_REASON}; accepted there: torch.float16 (bfloat16 "
                        "runs on a CUDA device)")
    if q.dim() == 4 and q.shape[-1] not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"head dim {q.shape[-1]} is not supported; accepted: {SUPPORTED_HEAD_DIMS}")
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dim() == 4 and t.stride(-1) != 1:
            raise ValueError(f"{name}'s last dimension must be contiguous (stride 1), got strides "
                             f"{t.stride()}")


def flash_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_seqlens: torch.Tensor,
                 sm_scale: float | None = None, num_splits: int | None = None, max_seqlen: int | None = None,
                 return_config: bool = False):
    """Attention of a few new tokens against a KV cache, as `flash_attn_with_kvcache` computes it.

    q: (B, L_q, H_q, d), the new tokens' queries; k_cache, v_cache: (B, L_cache, H_kv, d), H_q a
    multiple of H_kv, each already holding the new tokens' keys and values; cache_seqlens: (B,)
    torch.int32, the valid keys of each sequence, L_q ≤ cache_seqlens[b] ≤ L_cache. Query i attends
    to keys 0 … cache_seqlens[b] − L_q + i. float16 or bfloat16 (float16 only under the
    interpreter), d in SUPPORTED_HEAD_DIMS, the last dimension contiguous. Returns O (B, L_q, H_q, d)
    in q's dtype (and the `DecodeConfig` with `return_config`).

    sm_scale: the softmax scale, 1/sqrt(d) by default. num_splits: the KV length is cut into this
    many splits (None: `get_decode_config`'s policy). max_seqlen: the largest cache_seqlens entry,
    if the caller knows it; None reads the lengths from the device (one synchronization) and checks
    them against L_q and L_cache: pass it where no host sync may happen (inside a CUDA graph capture),
    after a checked call.
    """
    validate(q, k_cache, v_cache, cache_seqlens)
    if max_seqlen is None:
        if q.is_cuda and torch.cuda.is_current_stream_capturing():
            raise ValueError("max_seqlen is needed inside a CUDA graph capture (the lengths cannot be read "
                             "there): make one call without it first, which checks them")
        lengths = cache_seqlens.tolist()
        check_decode(q, k_cache, v_cache, lengths)
        max_seqlen = max(lengths, default=0)
    else:
        check_decode(q, k_cache, v_cache, [max_seqlen] * q.shape[0])
    batch, len_q, heads_q, d = q.shape
    heads_kv = k_cache.shape[2]
    group = heads_q // heads_kv
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else DEFAULT_SMS
    cfg = get_decode_config(batch, heads_kv, max_seqlen, d, sms, num_splits)
    out = torch.empty_like(q)
    if out.numel():
        _launch(q, k_cache, v_cache, cache_seqlens, out, cfg, group, sm_scale)
    return (out, cfg) if return_config else out


def _launch(q, k_cache, v_cache, cache_seqlens, out, cfg: DecodeConfig, group: int, sm_scale) -> None:
    batch, len_q, heads_q, d = q.shape
    partial = cfg.splits > 1
    if partial:
        o_part = torch.empty(batch, heads_q, len_q, cfg.splits, d, dtype=torch.float32, device=q.device)
        lse_part = torch.empty(batch, heads_q, len_q, cfg.splits, dtype=torch.float32, device=q.device)
    else:
        o_part = lse_part = out  # unused: the kernel writes O
    scale = (1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)) * LOG2E  # scores in base 2
    block_m = max(16, triton.next_power_of_2(group * len_q))  # tl.dot's least M
    _decode_split_kernel[(cfg.splits, k_cache.shape[2], batch)](
        q, k_cache, v_cache, cache_seqlens, out, o_part, lse_part,
        q.stride(0), q.stride(1), q.stride(2), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), out.stride(0), out.stride(1), out.stride(2),
        heads_q, cfg.splits, scale,
        LEN_Q=len_q, GROUP=group, BLOCK_M=block_m, BLOCK_N=cfg.BLOCK_N, HEAD_DIM=d, PARTIAL=partial,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    if partial:
        _decode_combine_kernel[(batch * heads_q * len_q,)](
            o_part, lse_part, out, out.stride(0), out.stride(1), out.stride(2), heads_q, cfg.splits,
            LEN_Q=len_q, BLOCK_S=triton.next_power_of_2(cfg.splits), HEAD_DIM=d, num_warps=4)
