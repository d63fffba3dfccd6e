"""What the backward (`minimodel.kernel.backward`) accepts: the forward's Q, K, V (`inputs.validate`),
then O, dO and LSE against them, and the softmax scale; or an error naming what is wrong and what
is accepted."""

from __future__ import annotations

import math

import torch

from minimodel.kernel.inputs import validate as validate_forward


def validate(q, k, v, o, lse, do) -> None:
    """The forward's checks on Q, K, V, then O, dO and LSE against them."""
    # detached: inputs that require grad are what a backward is for (the forward refuses them)
    validate_forward(*(t.detach() if isinstance(t, torch.Tensor) else t for t in (q, k, v)))
    B, H, N, _ = q.shape
    for name, t in (("O", o), ("dO", do)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.shape != q.shape:
            raise ValueError(f"{name} must have Q's shape (B, H, N, d) = {tuple(q.shape)}, "
                             f"got {tuple(t.shape)}")
        if t.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {t.dtype}; accepted: Q's dtype, {q.dtype}")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device}; accepted: Q's device, {q.device}")
    if not isinstance(lse, torch.Tensor):
        raise TypeError(f"LSE must be a torch.Tensor, got {type(lse).__name__}")
    if lse.shape != (B, H, N) or lse.dtype != torch.float32 or lse.device != q.device:
        raise ValueError(f"LSE must be float32 of shape (B, H, N) = {(B, H, N)} on {q.device} (the "
                         f"forward's return_lse=True), got {lse.dtype} {tuple(lse.shape)} on {lse.device}")


def scale(d: int, sm_scale: float | None) -> float:
    """The softmax scale: 1/sqrt(d) by default, else any finite number > 0."""
    value = 1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"sm_scale must be a finite number > 0, got {sm_scale!r}")
    return value
