"""The differentiable entry point, `attention(q, k, v, causal=False, sm_scale=None, deterministic=True)`:
the forward is `flash_attn_forward` (its default kernel, which stores the LSE the backward needs),
the backward `flash_attn_backward`; gradients flow to whichever of q, k, v require them.

    attention(q, k, v, causal=True).sum().backward()   # q.grad, k.grad, v.grad
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from minimodel.kernel.backward import flash_attn_backward
from minimodel.kernel.flash import flash_attn_forward


class FlashAttention(torch.autograd.Function):
    """softmax(Q Kᵀ · sm_scale) V; saves Q, K, V, O and LSE for the backward."""

    @staticmethod
    def forward(ctx, q, k, v, causal: bool, sm_scale: float | None, deterministic: bool):
        # autograd runs this under no_grad, where the forward takes inputs that require grad
        o, lse = flash_attn_forward(q, k, v, causal=causal, sm_scale=sm_scale, return_lse=True)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.sm_scale, ctx.deterministic = causal, sm_scale, deterministic
        return o

    @staticmethod
    @once_differentiable  # no double backward: a second derivative raises
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = flash_attn_backward(q, k, v, o, lse, do, ctx.causal, ctx.sm_scale,
                                         deterministic=ctx.deterministic)
        return dq, dk, dv, None, None, None


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              sm_scale: float | None = None, deterministic: bool = True) -> torch.Tensor:
    """Attention softmax(q kᵀ · sm_scale) V that autograd can differentiate.

    Shapes, dtypes, devices and layouts as `flash_attn_forward` takes them (q: (B, H, N, d);
    k, v: (B, H_kv, N, d), H divisible by H_kv). causal: query i sees keys j <= i.
    sm_scale defaults to 1/sqrt(d). deterministic (default True): the backward gives the same
    bits on every call; False lets it add dQ inside its dK/dV kernel where that is faster (on
    Hopper), in an order that varies (`flash_attn_backward`). Without autograd (no input
    requires grad, or under torch.no_grad()) it is `flash_attn_forward` alone, with no LSE stored.
    """
    tensors = (q, k, v)
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors):
        return FlashAttention.apply(q, k, v, bool(causal), sm_scale, bool(deterministic))
    return flash_attn_forward(q, k, v, causal=causal, sm_scale=sm_scale)
