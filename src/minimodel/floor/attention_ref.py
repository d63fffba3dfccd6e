"""The attention every stage compares with (notes/labs.md: lab 01 C), on the floor below the stages.

- `reference_attn`: the naive, obviously correct attention; `upcast=True` computes in float64,
  the reference of every correctness check (the GPU stage's, the contenders');
- `attn_naive`: explicit matmul, softmax, matmul, one op per step of theory 02's naive
  accounting, so its byte traffic can be measured op by op (the CPU stage's `bytecount`, the
  GPU stage's Nsight Compute rows).

All take (..., N, d) tensors; K and V may have fewer heads than Q in dimension -3
(grouped-query attention) in `reference_attn`.
"""

from __future__ import annotations

import math

import torch


def softmax_scale(d: int, sm_scale: float | None) -> float:
    """The softmax scale: 1/sqrt(d) unless `sm_scale` is given."""
    return 1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)


def check_qkv(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor) -> None:
    """Q, K, V of one rank >= 2, K and V of equal shapes sharing d with Q; else ValueError."""
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
    check_qkv(Q, K, V)
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
    S = (Q @ K.transpose(-1, -2)) * softmax_scale(Q.shape[-1], sm_scale)
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
    traffic `byte_model.forward.naive_fp32_softmax_transfers` accounts for. False: the softmax reads S and
    writes P in their own dtype (a CUDA softmax computes in fp32 in registers), the traffic of
    `byte_model.forward.naive_transfers`.
    """
    check_qkv(Q, K, V)
    *lead, n, d = Q.shape
    q, k, v = (t.reshape(-1, t.shape[-2], d) for t in (Q, K, V))
    S = torch.baddbmm(torch.empty(q.shape[0], n, k.shape[-2], dtype=Q.dtype, device=Q.device),
                      q, k.transpose(-1, -2), beta=0.0, alpha=softmax_scale(d, sm_scale))
    if causal:
        S.masked_fill_(causal_mask(n, k.shape[-2], Q.device), float("-inf"))
    if fp32_softmax is None:
        fp32_softmax = Q.element_size() < 4
    if fp32_softmax:
        P = torch.softmax(S.float(), dim=-1).to(Q.dtype)
    else:
        P = torch.softmax(S, dim=-1)
    return torch.bmm(P, v).reshape(*lead, n, d)


def _accumulator(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _check_backward(Q, K, V, **like_q) -> None:
    check_qkv(Q, K, V)
    if K.shape[:-2] != Q.shape[:-2]:
        raise ValueError(f"Q, K and V must have the same leading (batch, head) dimensions; got Q "
                         f"{tuple(Q.shape)}, K {tuple(K.shape)} (grouped K/V heads are not supported)")
    for name, t in like_q.items():
        if t.shape != Q.shape:
            raise ValueError(f"{name} must have Q's shape {tuple(Q.shape)}; got {tuple(t.shape)}")


def softmax_probabilities(Q, K, causal: bool = False, sm_scale: float | None = None) -> torch.Tensor:
    """P = softmax(scale·Q Kᵀ [+ causal mask]) in the inputs' dtype: what the naive forward stores."""
    S = (Q.to(_accumulator(Q.dtype)) @ K.to(_accumulator(Q.dtype)).transpose(-1, -2))
    S = S * softmax_scale(Q.shape[-1], sm_scale)
    if causal:
        S = S.masked_fill(causal_mask(Q.shape[-2], K.shape[-2], Q.device), float("-inf"))
    return torch.softmax(S, dim=-1).to(Q.dtype)


def attn_naive_backward(Q, K, V, P, dO, sm_scale: float | None = None):
    """(dQ, dK, dV) of naive attention from the P its forward stored (causal masking is in P).

    Each step is one op over tensors in the inputs' dtype, as autograd runs them: the scale is
    folded into the last two matmuls (baddbmm with beta=0 reads no input matrix), softmax's
    backward is `_softmax_backward_data` (dS = P ∘ (dP − rowsum(P ∘ dP)), one pass over dP and P).
    """
    _check_backward(Q, K, V, dO=dO)
    *lead, n, d = Q.shape
    n_k = K.shape[-2]
    if P.shape != (*lead, n, n_k):
        raise ValueError(f"P must have shape {(*lead, n, n_k)} (Q's rows × K's rows); got {tuple(P.shape)}")
    q, k, v, do = (t.reshape(-1, t.shape[-2], d) for t in (Q, K, V, dO))
    p = P.reshape(-1, n, n_k)
    scale = softmax_scale(d, sm_scale)
    dV = torch.bmm(p.transpose(-1, -2), do)
    dP = torch.bmm(do, v.transpose(-1, -2))
    dS = torch.ops.aten._softmax_backward_data(dP, p, -1, p.dtype)
    dQ = torch.baddbmm(torch.empty(q.shape, dtype=Q.dtype, device=Q.device), dS, k, beta=0.0, alpha=scale)
    dK = torch.baddbmm(torch.empty(k.shape, dtype=Q.dtype, device=Q.device), dS.transpose(-1, -2), q,
                       beta=0.0, alpha=scale)
    return dQ.reshape(Q.shape), dK.reshape(K.shape), dV.reshape(V.shape)
