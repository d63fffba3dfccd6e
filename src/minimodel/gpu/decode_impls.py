"""Decode's implementations on a CUDA device, each behind one call: `make(name, case)` returns a
function of no arguments that computes O (B, L_q, H_q, d) of the case's inputs, with what it
chose (`info`), or raises `Unsupported` saying why it does not take the case. Each is asked as a
user would call it, on the case's tensors in FlashAttention's kvcache layout (q (B, L_q, H_q, d),
caches (B, L_cache, H_kv, d), `cache_seqlens`):

- `triton`: this project's split-KV kernel, `minimodel.kernel.decode.flash_decode` (its config in
  `info`); `triton_one_split`: the same held to one split, no combine (what the splits buy);
- `naive`: `floor.decode_ref.naive_decode`, sequence by sequence;
- `sdpa_flash`, `sdpa_efficient`, `sdpa_cudnn`: PyTorch's SDPA with that backend alone, on the
  caches' transposed views (GQA through `enable_gqa`). With every sequence the caches' length, the
  new tokens' mask is `causal_lower_right`; a ragged batch needs a boolean mask, which a backend
  may refuse;
- `flex`: FlexAttention (compiled; its decoding kernel for short queries) with a block mask of the
  lengths and the new tokens' causality;
- `fa4`: FlashAttention-4 (`flash_attn.cute`): `flash_attn_func` (causal is aligned to the end)
  where every sequence has the caches' length, else `flash_attn_varlen_func` with `seqused_k`.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings

import torch
import torch._dynamo
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from torch.nn.functional import scaled_dot_product_attention

from minimodel.floor import contract
from minimodel.floor.decode_ref import naive_decode
from minimodel.kernel.decode import flash_decode

IMPLEMENTATIONS = (contract.TRITON, contract.TRITON_ONE_SPLIT, contract.NAIVE, *contract.SDPA_BACKENDS,
                   contract.FLEX, contract.FA4)
FLEX_RECOMPILE_LIMIT = 256  # FlexAttention compiles once per shape: every point of the grid must compile


class Unsupported(Exception):
    """The implementation does not take this case (the message says why)."""


@dataclasses.dataclass
class Case:
    q: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    cache_seqlens: torch.Tensor  # int32 on the device
    lengths: tuple[int, ...]  # the same, on the host

    @property
    def full(self) -> bool:
        """Every sequence as long as the caches: no per-sequence mask needed."""
        return all(n == self.k_cache.shape[1] for n in self.lengths)


def make(name: str, case: Case):
    """(call, info) of implementation `name` at `case` (module docstring)."""
    if name not in IMPLEMENTATIONS:
        raise ValueError(f"unknown decode implementation {name!r}; accepted: {', '.join(IMPLEMENTATIONS)}")
    if name in (contract.TRITON, contract.TRITON_ONE_SPLIT):
        splits = 1 if name == contract.TRITON_ONE_SPLIT else None
        _, cfg = flash_decode(case.q, case.k_cache, case.v_cache, case.cache_seqlens, num_splits=splits,
                              return_config=True)
        top = max(case.lengths)
        return (lambda: flash_decode(case.q, case.k_cache, case.v_cache, case.cache_seqlens,
                                     num_splits=cfg.splits, max_seqlen=top)), cfg.as_row()
    if name == contract.NAIVE:
        return (lambda: naive_decode(case.q, case.k_cache, case.v_cache, case.lengths)), {}
    if name in contract.SDPA_BACKENDS:
        return _sdpa(getattr(SDPBackend, contract.SDPA_BACKENDS[name]), case), {}
    if name == contract.FLEX:
        return _flex(case), {}
    return _fa4(case), {}


def _views(case: Case):
    """q, k, v as (B, H, L, d) views, the caches cut to the longest sequence."""
    top = max(case.lengths)
    return (case.q.transpose(1, 2), case.k_cache[:, :top].transpose(1, 2),
            case.v_cache[:, :top].transpose(1, 2))


def _allowed(case: Case) -> torch.Tensor:
    """(B, 1, L_q, L): True where new token i of sequence b sees key j (j <= len_b − L_q + i)."""
    len_q, top = case.q.shape[1], max(case.lengths)
    token = torch.arange(len_q, device=case.q.device)[None, :, None]
    key = torch.arange(top, device=case.q.device)[None, None, :]
    return (key <= case.cache_seqlens.long()[:, None, None] - len_q + token)[:, None]


def _sdpa(backend, case: Case):
    q, k, v = _views(case)
    gqa = q.shape[1] != k.shape[1]
    if case.full:
        mask = None if q.shape[2] == 1 else causal_lower_right(q.shape[2], k.shape[2])
    else:
        mask = _allowed(case)

    def call():
        with sdpa_kernel(backend):
            return scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa).transpose(1, 2)

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        try:
            call()
        except RuntimeError as err:  # "No available kernel": the backend's reasons come as warnings
            why = "; ".join(dict.fromkeys(" ".join(str(w.message).split())[:160] for w in said))
            raise Unsupported(f"{str(err).splitlines()[0][:120]} {why}".strip()) from err
    return call


@functools.cache
def _compiled_flex():
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, FLEX_RECOMPILE_LIMIT)
    return torch.compile(flex_attention)


def _flex(case: Case):
    q, k, v = _views(case)
    lengths, len_q = case.cache_seqlens, q.shape[2]

    def mask_mod(b, h, q_idx, kv_idx):
        return kv_idx <= lengths[b] - len_q + q_idx

    block_mask = create_block_mask(mask_mod, q.shape[0], None, len_q, k.shape[2], device=q.device)
    flex = _compiled_flex()
    return lambda: flex(q, k, v, block_mask=block_mask, enable_gqa=q.shape[1] != k.shape[1]).transpose(1, 2)


def _fa4(case: Case):
    try:
        # not at the top: FlashAttention-4 is optional
        from flash_attn.cute import flash_attn_func, flash_attn_varlen_func
    except ImportError as err:
        raise Unsupported(f"flash_attn.cute (FlashAttention-4) is not installed: {err}") from err
    q, k, v = case.q, case.k_cache, case.v_cache
    if case.full:
        def call():
            return flash_attn_func(q, k, v, causal=True)[0]
    else:
        batch, len_q = q.shape[:2]
        flat = q.reshape(batch * len_q, *q.shape[2:])
        cu_q = torch.arange(0, batch + 1, device=q.device, dtype=torch.int32) * len_q

        def call():
            out = flash_attn_varlen_func(flat, k, v, cu_seqlens_q=cu_q, max_seqlen_q=len_q,
                                         seqused_k=case.cache_seqlens, causal=True)[0]
            return out.view(q.shape)
    try:
        call()
    except (AssertionError, TypeError, ValueError, RuntimeError, NotImplementedError) as err:
        raise Unsupported(f"FA4 refuses this case: {type(err).__name__}: {str(err).splitlines()[0][:160]}"
                          if str(err) else f"FA4 refuses this case: {type(err).__name__}") from err
    return call
