"""Plain PyTorch attention references (notes/labs.md: lab 01 C, lab 02 C).

- `reference_attn`: the naive, obviously correct attention; `upcast=True` computes in float64.
- `attn_naive`: explicit matmul, softmax, matmul, one op per step of theory 02's naive
  accounting, so its byte traffic can be measured op by op (`minimodel.cpu.bytecount`).
- `attn_flash_reference_cpu`: theory 02's tiled loop in FlashAttention-2 order (query tiles
  outside), online softmax in fp32, no (N, N) tensor ever created. Tiles are "loaded" with an
  explicit copy so that each crossing of the slow-memory boundary is one op.

All take (..., N, d) tensors; K and V may have fewer heads than Q in dimension -3
(grouped-query attention) in `reference_attn`.
"""

from __future__ import annotations

import math

import torch


def _scale(d: int, sm_scale: float | None) -> float:
    return 1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)


def _check_qkv(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor) -> None:
    if Q.dim() < 2 or K.dim() != Q.dim() or V.dim() != Q.dim():
        raise ValueError(f"Q, K, V must have the same rank >= 2 (..., N, d); got shapes "
                         f"{tuple(Q.shape)}, {tuple(K.shape)}, {tuple(V.shape)}")
    if K.shape != V.shape or Q.shape[-1] != K.shape[-1]:
        raise ValueError(f"K and V must have equal shapes and share d with Q; got Q "
                         f"{tuple(Q.shape)}, K {tuple(K.shape)}, V {tuple(V.shape)}")


def causal_mask(n_q: int, n_k: int, device=None) -> torch.Tensor:
    """True where query i may not see key j (j > i): the position attends to itself (>=)."""
    i = torch.arange(n_q, device=device)[:, None]
    j = torch.arange(n_k, device=device)[None, :]
    return j > i


def reference_attn(Q, K, V, causal: bool = True, sm_scale: float | None = None,
                   upcast: bool = False) -> torch.Tensor:
    """softmax(Q K^T · scale [+ causal mask]) V in the inputs' dtype, or float64 with `upcast`.

    K and V may have H_kv heads (dimension -3) with H divisible by H_kv; each K/V head then
    serves H / H_kv consecutive query heads.
    """
    _check_qkv(Q, K, V)
    if Q.dim() >= 3 and K.shape[-3] != Q.shape[-3]:
        if Q.shape[-3] % K.shape[-3]:
            raise ValueError(f"query heads ({Q.shape[-3]}) must be a multiple of key/value "
                             f"heads ({K.shape[-3]})")
        group = Q.shape[-3] // K.shape[-3]
        K = K.repeat_interleave(group, dim=-3)
        V = V.repeat_interleave(group, dim=-3)
    out_dtype = Q.dtype
    if upcast:
        Q, K, V = Q.double(), K.double(), V.double()
    S = (Q @ K.transpose(-1, -2)) * _scale(Q.shape[-1], sm_scale)
    if causal:
        S = S.masked_fill(causal_mask(Q.shape[-2], K.shape[-2], Q.device), float("-inf"))
    P = torch.softmax(S, dim=-1)
    O = P @ V
    return O if upcast else O.to(out_dtype)


def attn_naive(Q, K, V, causal: bool = False, sm_scale: float | None = None,
               fp32_softmax: bool | None = None) -> torch.Tensor:
    """Naive attention as three steps: S = scale·Q K^T, P = softmax(S), O = P V.

    The scale is folded into the first matmul (baddbmm with beta=0 reads no input matrix),
    so each step is one op, as theory 02 counts them (a causal mask adds one pass over S).
    fp32_softmax (default: for 2-byte dtypes, as the CPU stage measures it): S is upcast, the
    softmax runs in fp32 and P is cast back, as PyTorch's numerically careful code does, the
    traffic `symbolic.naive_fp32_softmax_transfers` accounts for. False: the softmax reads S and
    writes P in their own dtype (a CUDA softmax computes in fp32 in registers), the traffic of
    `symbolic.naive_transfers`.
    """
    _check_qkv(Q, K, V)
    *lead, n, d = Q.shape
    q, k, v = (t.reshape(-1, t.shape[-2], d) for t in (Q, K, V))
    S = torch.baddbmm(torch.empty(q.shape[0], n, k.shape[-2], dtype=Q.dtype, device=Q.device),
                      q, k.transpose(-1, -2), beta=0.0, alpha=_scale(d, sm_scale))
    if causal:
        S.masked_fill_(causal_mask(n, k.shape[-2], Q.device), float("-inf"))
    if fp32_softmax is None:
        fp32_softmax = Q.element_size() < 4
    if fp32_softmax:
        P = torch.softmax(S.float(), dim=-1).to(Q.dtype)
    else:
        P = torch.softmax(S, dim=-1)
    return torch.bmm(P, v).reshape(*lead, n, d)


def _load_tile(view: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Bring one tile from slow memory into a fresh (on-chip) buffer: one read of the tile."""
    return view.to(dtype=dtype, copy=True)


def attn_flash_reference_cpu(Q, K, V, B_r: int = 64, B_c: int = 64, causal: bool = False,
                             sm_scale: float | None = None) -> torch.Tensor:
    """Theory 02's tiled flash attention in pure PyTorch (FlashAttention-2 loop order).

    For each query tile (B_r rows) the K and V tiles (B_c rows) stream past once; the running
    maximum m and sum l rescale the partial output (the online softmax), so no (N, N) tensor
    exists at any time. Accumulates in fp32 (float64 for float64 inputs). Tails where N is no
    multiple of a tile are plain shorter tiles. With `causal`, key tiles past the query tile
    are never loaded.
    """
    _check_qkv(Q, K, V)
    if B_r < 1 or B_c < 1:
        raise ValueError(f"tile sizes must be >= 1, got B_r={B_r}, B_c={B_c}")
    n, d = Q.shape[-2], Q.shape[-1]
    n_k = K.shape[-2]
    scale = _scale(d, sm_scale)
    acc = torch.float64 if Q.dtype == torch.float64 else torch.float32
    O = torch.empty_like(Q)
    for i0 in range(0, n, B_r):
        i1 = min(i0 + B_r, n)
        q = _load_tile(Q[..., i0:i1, :], acc)
        o = torch.zeros(q.shape, dtype=acc, device=Q.device)
        m = torch.full(q.shape[:-1], float("-inf"), dtype=acc, device=Q.device)
        ell = torch.zeros(q.shape[:-1], dtype=acc, device=Q.device)
        kv_end = min(i1, n_k) if causal else n_k
        for j0 in range(0, kv_end, B_c):
            j1 = min(j0 + B_c, kv_end)
            k = _load_tile(K[..., j0:j1, :], acc)
            v = _load_tile(V[..., j0:j1, :], acc)
            s = (q @ k.transpose(-1, -2)) * scale
            if causal and j1 - 1 > i0:  # only tiles that cross the diagonal need a mask
                rows = torch.arange(i0, i1, device=Q.device)[:, None]
                cols = torch.arange(j0, j1, device=Q.device)[None, :]
                s = s.masked_fill(cols > rows, float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1))
            alpha = torch.exp(m - m_new)  # rescales what was summed under the old maximum
            p = torch.exp(s - m_new[..., None])
            ell = alpha * ell + p.sum(dim=-1)
            o = alpha[..., None] * o + p @ v
            m = m_new
        O[..., i0:i1, :] = o / ell[..., None]
    return O
