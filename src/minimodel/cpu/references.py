"""Theory 02's tiled loop in plain PyTorch (notes/labs.md: lab 02 C), beside the naive attention of
`minimodel.floor.attention_ref`.

- `attn_flash_reference_cpu`: theory 02's tiled loop in FlashAttention-2 order (query tiles
  outside), online softmax in fp32, no (N, N) tensor ever created. Tiles are "loaded" with an
  explicit copy so that each crossing of the slow-memory boundary is one op.

It takes (..., N, d) tensors.
"""

from __future__ import annotations

import torch

from minimodel.floor.attention_ref import check_qkv, softmax_scale
from minimodel.floor.contract import LAB_TILE


def _load_tile(view: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Bring one tile from slow memory into a fresh (on-chip) buffer: one read of the tile."""
    return view.to(dtype=dtype, copy=True)


def attn_flash_reference_cpu(Q, K, V, B_r: int = LAB_TILE[0], B_c: int = LAB_TILE[1], causal: bool = False,
                             sm_scale: float | None = None) -> torch.Tensor:
    """Theory 02's tiled flash attention in pure PyTorch (FlashAttention-2 loop order).

    For each query tile (B_r rows) the K and V tiles (B_c rows) stream past once; the running
    maximum m and sum l rescale the partial output (the online softmax), so no (N, N) tensor
    exists at any time. Accumulates in fp32 (float64 for float64 inputs). Tails where N is no
    multiple of a tile are plain shorter tiles. With `causal`, key tiles past the query tile
    are never loaded.
    """
    check_qkv(Q, K, V)
    if B_r < 1 or B_c < 1:
        raise ValueError(f"tile sizes must be >= 1, got B_r={B_r}, B_c={B_c}")
    n, d = Q.shape[-2], Q.shape[-1]
    n_k = K.shape[-2]
    scale = softmax_scale(d, sm_scale)
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
