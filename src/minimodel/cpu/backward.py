"""Plain PyTorch references of the attention backward, one op per step of the byte model
(`minimodel.floor.byte_model.backward`), so that `minimodel.cpu.bytecount` can count their
traffic in the backward.

- `forward_with_lse`: O and the log-sum-exp of each query row, what the backward reads of the
  forward (in float64 with `upcast`).
- `attn_naive_backward`: PyTorch autograd's backward of naive attention from the stored P:
  dV = Pᵀ dO, dP = dO Vᵀ, dS = softmax's backward, dQ = scale·dS K, dK = scale·dSᵀ Q, each one op.
- `attn_flash_backward_reference_cpu`: FlashAttention-2's backward (Algorithm 2) tiled in pure
  PyTorch: D = rowsum(dO ∘ O) Q tile by Q tile, then K/V tiles outside and Q tiles inside, S and
  P recomputed from Q, K and LSE, dK and dV accumulated on chip, dQ read, updated and written
  back in slow memory once per K/V tile in fp32 (`contract.DQ_READ_MODIFY_WRITE`), then cast to
  the input's dtype. Tiles are "loaded" with an explicit copy, as in the forward's reference.

All take (..., N, d) tensors with one head of K and V per head of Q, and return (dQ, dK, dV) in
the inputs' dtype.
"""

from __future__ import annotations

import torch

from minimodel.cpu.references import _load_tile
from minimodel.floor.attention_ref import (  # the naive backward and its P: attention_ref, the floor
    _accumulator,
    _check_backward,
    causal_mask,
    check_qkv,
    softmax_scale,
)


def forward_with_lse(Q, K, V, causal: bool = False, sm_scale: float | None = None,
                     upcast: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(O, LSE): the attention and logsumexp(scale·Q Kᵀ [+ causal mask]) per query row, O in the
    inputs' dtype and LSE in fp32 (as the kernels store it), or both in float64 with `upcast`."""
    check_qkv(Q, K, V)
    dtype = torch.float64 if upcast else _accumulator(Q.dtype)
    S = (Q.to(dtype) @ K.to(dtype).transpose(-1, -2)) * softmax_scale(Q.shape[-1], sm_scale)
    if causal:
        S = S.masked_fill(causal_mask(Q.shape[-2], K.shape[-2], Q.device), float("-inf"))
    lse = torch.logsumexp(S, dim=-1)
    O = torch.exp(S - lse[..., None]) @ V.to(dtype)
    return (O, lse) if upcast else (O.to(Q.dtype), lse)


def attn_flash_backward_reference_cpu(Q, K, V, O, LSE, dO, B_r: int = 64, B_c: int = 64,
                                      causal: bool = False, sm_scale: float | None = None):
    """(dQ, dK, dV) of attention by FlashAttention-2's tiled backward (module docstring).

    LSE is the forward's log-sum-exp per query row (`forward_with_lse`). Accumulates in fp32
    (float64 for float64 inputs); no (N, N) tensor exists at any time. Tails where N is no
    multiple of a tile are shorter tiles. With `causal`, a K/V tile meets only the Q tiles from
    its diagonal on.
    """
    _check_backward(Q, K, V, O=O, dO=dO)
    if LSE.shape != Q.shape[:-1]:
        raise ValueError(f"LSE must have shape {tuple(Q.shape[:-1])} (one value per query row); "
                         f"got {tuple(LSE.shape)}")
    if B_r < 1 or B_c < 1:
        raise ValueError(f"tile sizes must be >= 1, got B_r={B_r}, B_c={B_c}")
    n, d = Q.shape[-2], Q.shape[-1]
    n_k = K.shape[-2]
    scale = softmax_scale(d, sm_scale)
    acc = _accumulator(Q.dtype)
    # D = rowsum(dO ∘ O), one Q tile at a time: O and dO read once, D written once (fp32)
    D = torch.empty_like(LSE, dtype=acc)
    for i0 in range(0, n, B_r):
        i1 = min(i0 + B_r, n)
        D[..., i0:i1] = (_load_tile(dO[..., i0:i1, :], acc) * _load_tile(O[..., i0:i1, :], acc)).sum(-1)
    dQ_acc = torch.empty_like(Q, dtype=acc)  # in slow memory: read, updated, written per K/V tile
    dK, dV = torch.empty_like(K), torch.empty_like(V)
    for j0 in range(0, n_k, B_c):
        j1 = min(j0 + B_c, n_k)
        k, v = _load_tile(K[..., j0:j1, :], acc), _load_tile(V[..., j0:j1, :], acc)
        dk = torch.zeros(k.shape, dtype=acc, device=Q.device)
        dv = torch.zeros(v.shape, dtype=acc, device=Q.device)
        for i0 in range((j0 // B_r) * B_r if causal else 0, n, B_r):
            i1 = min(i0 + B_r, n)
            q, do = _load_tile(Q[..., i0:i1, :], acc), _load_tile(dO[..., i0:i1, :], acc)
            lse, d_i = _load_tile(LSE[..., i0:i1], acc), _load_tile(D[..., i0:i1], acc)
            s = (q @ k.transpose(-1, -2)) * scale
            if causal and j1 - 1 > i0:  # only tiles that cross the diagonal need a mask
                rows = torch.arange(i0, i1, device=Q.device)[:, None]
                cols = torch.arange(j0, j1, device=Q.device)[None, :]
                s = s.masked_fill(cols > rows, float("-inf"))
            p = torch.exp(s - lse[..., None])
            dv += p.transpose(-1, -2) @ do
            ds = p * (do @ v.transpose(-1, -2) - d_i[..., None])
            dk += ds.transpose(-1, -2) @ q
            dq = (ds @ k) * scale
            if j0 == 0:  # every Q tile meets the first K/V tile first: nothing to read back yet
                dQ_acc[..., i0:i1, :] = dq
            else:
                dQ_acc[..., i0:i1, :] = _load_tile(dQ_acc[..., i0:i1, :], acc) + dq
        dK[..., j0:j1, :] = dk * scale
        dV[..., j0:j1, :] = dv
    dQ = torch.empty_like(Q)  # in slow memory like dK and dV, whatever its size
    dQ.copy_(dQ_acc)  # the last pass: the accumulator read, dQ written in the input's dtype
    return dQ, dK, dV
