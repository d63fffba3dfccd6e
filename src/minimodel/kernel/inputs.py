"""What the kernel accepts: the forward's inputs (`validate`), the backward's O, dO and LSE against
them (`validate_backward`), the softmax scale (`scale`); and whether Triton interprets it
(`INTERPRETED`, decided when this package was imported; a run sets it first, `minimodel.entry`)."""

from __future__ import annotations

import math

import torch
import triton

from minimodel.floor import contract

SUPPORTED_HEAD_DIMS = (16, 32, 64, 128, 256)
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
BF16_INTERPRETER_REASON = contract.BF16_INTERPRETER_REASON

# Triton decided when the kernels were defined (a run sets the switch before importing).
INTERPRETED = triton.knobs.runtime.interpret


def validate(Q, K, V) -> None:
    """Q (B, H, N, d), K and V (B, H_kv, N, d) as `flash_attn_forward` takes them, or an error
    naming what is wrong and what is accepted."""
    for name, t in (("Q", Q), ("K", K), ("V", V)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must have rank 4 (B, H, N, d), got shape {tuple(t.shape)}")
        if t.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"{name} has dtype {t.dtype}; accepted: torch.float16, torch.bfloat16")
    if not Q.dtype == K.dtype == V.dtype:
        raise TypeError(f"Q, K, V must share one dtype, got {Q.dtype}, {K.dtype}, {V.dtype}")
    B, H, N, d = Q.shape
    if K.shape != V.shape:
        raise ValueError(f"K and V must have the same shape, got {tuple(K.shape)} and {tuple(V.shape)}")
    Bk, Hk, Nk, dk = K.shape
    if (Bk, Nk, dk) != (B, N, d):
        raise ValueError(f"K and V must be (B, H_kv, N, d) = ({B}, H_kv, {N}, {d}) to match Q "
                         f"{tuple(Q.shape)}, got {tuple(K.shape)}")
    if (Hk == 0 and H != 0) or (Hk and H % Hk):
        raise ValueError(f"Q's heads ({H}) must be a multiple of K/V's heads ({Hk})")
    if d not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"head dim {d} is not supported; accepted: {SUPPORTED_HEAD_DIMS}")
    if not Q.device == K.device == V.device:
        raise ValueError(f"Q, K, V must be on one device, got {Q.device}, {K.device}, {V.device}")
    if Q.device.type == "cpu" and not INTERPRETED:
        raise ValueError("CPU tensors need Triton's interpreter: set TRITON_INTERPRET=1 before "
                         "importing triton, or pass CUDA tensors")
    if Q.device.type not in ("cuda", "cpu"):
        raise ValueError(f"device {Q.device} is not supported; accepted: cuda, or cpu under "
                         "TRITON_INTERPRET=1")
    if INTERPRETED and Q.dtype == torch.bfloat16:
        raise TypeError(f"bfloat16 is refused under Triton's interpreter: {BF16_INTERPRETER_REASON}; "
                        "accepted there: torch.float16 (bfloat16 runs on a CUDA device)")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (Q, K, V)):
        names = ", ".join(n for n, t in (("Q", Q), ("K", K), ("V", V)) if t.requires_grad)
        raise ValueError(f"{names} require grad, but this kernel is forward-only (no backward "
                         "pass): call it under torch.no_grad() or pass detached tensors, or take "
                         "minimodel.kernel.attention, which autograd differentiates")


def validate_backward(q, k, v, o, lse, do) -> None:
    """The forward's checks on Q, K, V, then O, dO and LSE against them."""
    # detached: inputs that require grad are what a backward is for (the forward refuses them)
    validate(*(t.detach() if isinstance(t, torch.Tensor) else t for t in (q, k, v)))
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
