"""Flash-attention forward in Triton (lab 02): `flash_attn_forward(Q, K, V, causal=True)`, the
tl kernels (pointer loads, and TMA on Hopper) and the one entry point of every forward kernel.

FlashAttention-2 order: one program per (query tile, batch·head) keeps its query tile, the running
maximum m, the running sum l and the fp32 output accumulator on chip while every key/value tile
streams past once (the online softmax of theory 02). Runs on a CUDA device, or on CPU tensors
under Triton's interpreter, which a run switches on before this module defines a kernel
(`minimodel.entry`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from minimodel.kernel import hopper, launch
from minimodel.kernel.config import FwdConfig
from minimodel.kernel.inputs import scale as _scale
from minimodel.kernel.inputs import validate as _validate
from minimodel.kernel.launch import LN2, LOG2E, HostDescriptor, launch_config
from minimodel.kernel.launch import grid as _grid


@triton.jit
def _softmax_step(acc, l_i, m_i, q, kt, v, cols, offs_m, N, qk_scale,
                  MASKED: tl.constexpr, IS_CAUSAL: tl.constexpr):
    """One key/value tile of the online softmax (theory 02), scores in base 2.

    The running maximum m_i is of the raw scores q·k (qk_scale > 0 keeps the order), and each
    score has the maximum subtracted before it is scaled: every exponent is <= 0 whatever the
    scale, so no p overflows and the row maximum's p is exactly 1. (Scaling first and subtracting
    the scaled maximum in one multiply-add leaves that product's rounding error, up to 2⁻²⁴ of
    the score, in the exponent: past scaled scores of about 2³¹ it exceeds the 128 that exp2
    can take, and the row turns to NaN.)
    """
    qk = tl.dot(q, kt)
    if MASKED:  # only the diagonal band and the ragged tail pay for a mask
        valid = cols[None, :] < N
        if IS_CAUSAL:
            valid = valid & (offs_m[:, None] >= cols[None, :])
        qk = tl.where(valid, qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    p = tl.math.exp2((qk - m_new[:, None]) * qk_scale)
    alpha = tl.math.exp2((m_i - m_new) * qk_scale)  # rescales what was summed under the old maximum
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    return acc, l_i, m_new


@triton.jit
def _online_softmax_state(BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr):
    """Running maximum (−∞), running sum (0) and fp32 output accumulator (0) of a query tile."""
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    return m_i, l_i, acc


@triton.jit
def _kv_range(pid_m, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr):
    """Keys [0, lo) need no mask; [lo, hi) hold the causal diagonal band or the ragged tail;
    causal tiles above the diagonal (keys >= hi) are never loaded."""
    if IS_CAUSAL:
        lo = pid_m * BLOCK_M
        hi = tl.minimum((pid_m + 1) * BLOCK_M, N)
    else:
        lo = (N // BLOCK_N) * BLOCK_N
        hi = N
    return lo, hi


@triton.jit
def _program_ids(N, BLOCK_M: tl.constexpr, IS_CAUSAL: tl.constexpr):
    """(query tile, batch·head) of this program, every program on the x axis (y stops at 65,535);
    the query tiles of one head are consecutive, sharing its K/V tiles in L2."""
    num_m = tl.cdiv(N, BLOCK_M)
    pid = tl.program_id(0)
    pid_m = pid % num_m
    if IS_CAUSAL:  # the last query tiles have the most keys to visit: start them first
        pid_m = num_m - 1 - pid_m
    return pid_m, pid // num_m


@triton.jit
def _store_lse(LSE, pid_bh, offs_m, m_i, l_i, N, qk_scale):
    # natural-log log-sum-exp per row, what a backward pass needs (m_i is the raw maximum)
    lse = (m_i * qk_scale + tl.math.log2(l_i)) * LN2
    tl.store(LSE + pid_bh.to(tl.int64) * N + offs_m, lse, mask=offs_m < N)


@triton.jit
def _flash_fwd_kernel(
    Q, K, V, O, LSE, qk_scale,
    stride_qb, stride_qh, stride_qn, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_on, stride_od,
    H, N, GROUP,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr, STORE_LSE: tl.constexpr,
):
    """Pointer loads with real strides: any layout, any device. Every element offset is 64-bit: a
    row index times a stride passes 2³¹ in a long transposed (B, N, H, d) tensor."""
    pid_m, pid_bh = _program_ids(N, BLOCK_M, IS_CAUSAL)
    b = (pid_bh // H).to(tl.int64)
    h = (pid_bh % H).to(tl.int64)
    h_kv = h // GROUP  # grouped-query attention: GROUP query heads share one K/V head

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    rows_m = offs_m.to(tl.int64)[:, None]
    rows_n = offs_n.to(tl.int64)
    offs_d = tl.arange(0, HEAD_DIM).to(tl.int64)
    q_ptrs = Q + b * stride_qb + h * stride_qh + rows_m * stride_qn + offs_d[None, :] * stride_qd
    q = tl.load(q_ptrs, mask=offs_m[:, None] < N, other=0.0)
    kt_ptrs = K + b * stride_kb + h_kv * stride_kh + rows_n[None, :] * stride_kn + offs_d[:, None] * stride_kd
    v_ptrs = V + b * stride_vb + h_kv * stride_vh + rows_n[:, None] * stride_vn + offs_d[None, :] * stride_vd

    m_i, l_i, acc = _online_softmax_state(BLOCK_M, HEAD_DIM)
    lo, hi = _kv_range(pid_m, N, BLOCK_M, BLOCK_N, IS_CAUSAL)
    for start_n in tl.range(0, lo, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        row = tl.cast(start_n, tl.int64)
        kt = tl.load(kt_ptrs + row * stride_kn)
        v = tl.load(v_ptrs + row * stride_vn)
        acc, l_i, m_i = _softmax_step(acc, l_i, m_i, q, kt, v, start_n + offs_n, offs_m, N,
                                      qk_scale, False, IS_CAUSAL)
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        row = tl.cast(start_n, tl.int64)
        kt = tl.load(kt_ptrs + row * stride_kn, mask=cols[None, :] < N, other=0.0)
        v = tl.load(v_ptrs + row * stride_vn, mask=cols[:, None] < N, other=0.0)
        acc, l_i, m_i = _softmax_step(acc, l_i, m_i, q, kt, v, cols, offs_m, N,
                                      qk_scale, True, IS_CAUSAL)

    # every row sees key 0, so l_i > 0: no division by zero, no NaN
    acc = acc / l_i[:, None]
    o_ptrs = O + b * stride_ob + h * stride_oh + rows_m * stride_on + offs_d[None, :] * stride_od
    tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=offs_m[:, None] < N)
    if STORE_LSE:
        _store_lse(LSE, pid_bh, offs_m, m_i, l_i, N, qk_scale)


@triton.jit
def _flash_fwd_kernel_tma(
    desc_q, desc_k, desc_v, desc_o, LSE, qk_scale, H, N, GROUP,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr, STORE_LSE: tl.constexpr,
):
    """The same algorithm with tiles moved by TMA (4-D descriptors: 64-bit strides, coordinates
    per dimension, out-of-range rows read as 0)."""
    pid_m, pid_bh = _program_ids(N, BLOCK_M, IS_CAUSAL)
    b = pid_bh // H
    h = pid_bh % H
    h_kv = h // GROUP
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    q = desc_q.load([b, h, pid_m * BLOCK_M, 0]).reshape(BLOCK_M, HEAD_DIM)

    m_i, l_i, acc = _online_softmax_state(BLOCK_M, HEAD_DIM)
    lo, hi = _kv_range(pid_m, N, BLOCK_M, BLOCK_N, IS_CAUSAL)
    for start_n in tl.range(0, lo, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        kt = desc_k.load([b, h_kv, start_n, 0]).reshape(BLOCK_N, HEAD_DIM).T
        v = desc_v.load([b, h_kv, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        acc, l_i, m_i = _softmax_step(acc, l_i, m_i, q, kt, v, start_n + offs_n, offs_m, N,
                                      qk_scale, False, IS_CAUSAL)
    for start_n in range(lo, hi, BLOCK_N):
        kt = desc_k.load([b, h_kv, start_n, 0]).reshape(BLOCK_N, HEAD_DIM).T
        v = desc_v.load([b, h_kv, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        acc, l_i, m_i = _softmax_step(acc, l_i, m_i, q, kt, v, start_n + offs_n, offs_m, N,
                                      qk_scale, True, IS_CAUSAL)

    acc = acc / l_i[:, None]
    desc_o.store([b, h, pid_m * BLOCK_M, 0],
                 acc.to(desc_o.dtype).reshape(1, 1, BLOCK_M, HEAD_DIM))
    if STORE_LSE:
        _store_lse(LSE, pid_bh, offs_m, m_i, l_i, N, qk_scale)


def arguments(Q, K, V, O, LSE, qk_scale: float, cfg: FwdConfig, causal: bool, store_lse: bool,
              full: bool = True):
    """(kernel, grid, arguments in the kernel's order, launch options) of a tl-kernel call: what
    `flash_attn_forward` launches, and what a compile for a GPU without one specializes on.
    `full`: TMA tensors as `TensorDescriptor`s (what Triton's JIT needs), else `HostDescriptor`s
    (what a direct launch of the compiled kernel needs)."""
    B, H, N, d = Q.shape
    common = dict(H=H, N=N, GROUP=H // K.shape[1], HEAD_DIM=d, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N,
                  IS_CAUSAL=bool(causal), STORE_LSE=bool(store_lse))
    options = dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages,
                   **({"maxnreg": cfg.MAXNREG} if cfg.MAXNREG else {}))
    grid = _grid(N, B * H, cfg.BLOCK_M)
    if cfg.path == "tl_tma":
        def desc(t, rows):
            if not full:
                return HostDescriptor(t, list(t.shape), list(t.stride()))
            return TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, rows, d])

        args = dict(desc_q=desc(Q, cfg.BLOCK_M), desc_k=desc(K, cfg.BLOCK_N), desc_v=desc(V, cfg.BLOCK_N),
                    desc_o=desc(O, cfg.BLOCK_M), LSE=LSE, qk_scale=qk_scale, **common)
        return _flash_fwd_kernel_tma, grid, args, options
    strides = {f"stride_{name}{axis}": stride for name, t in zip("qkvo", (Q, K, V, O), strict=True)
               for axis, stride in zip("bhnd", t.stride(), strict=True)}
    args = dict(Q=Q, K=K, V=V, O=O, LSE=LSE, qk_scale=qk_scale, **strides, **common)
    return _flash_fwd_kernel, grid, args, options


def arguments_of(cfg: FwdConfig):
    """`hopper.arguments` or `arguments`: the call of the kernel `cfg` runs."""
    return hopper.arguments if cfg.path == "gluon" else arguments


def flash_attn_forward(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, causal: bool = True,
                       sm_scale: float | None = None, return_lse: bool = False,
                       config: FwdConfig | None = None):
    """Attention softmax(Q Kᵀ · sm_scale) V, without materializing the N × N scores.

    Q: (B, H, N, d); K, V: (B, H_kv, N, d), H divisible by H_kv (grouped-query attention, K and V
    not copied); float16 or bfloat16 on one CUDA device, or the CPU under TRITON_INTERPRET=1; d in
    `SUPPORTED_HEAD_DIMS`; any strides. causal: query i sees keys j <= i; True by default, lab 02's
    signature (`attention` and the backward default to False, as SDPA and FlashAttention do).
    sm_scale: any finite number > 0 (a huge one gives a hard maximum, never NaN), default 1/sqrt(d).
    Inputs that require grad are refused while autograd is on (`attention` is differentiable).
    return_lse: also return each row's natural-log log-sum-exp, (B, H, N) float32. config: kernel
    and tiles (`FwdConfig`), the policy's by default; what runs is `launch_config(Q, K, V, causal,
    config)`. Returns O with Q's shape and dtype (contiguous), and LSE when asked.
    """
    try:
        key = launch.launch_key(Q, K, V, causal, return_lse, config)
        seen = launch.LAUNCHES.get(key)
    except (AttributeError, TypeError):  # not tensors, or an unhashable config: the checks say so
        key = seen = None
    if seen is not None and torch.is_grad_enabled() and (Q.requires_grad or K.requires_grad
                                                          or V.requires_grad):
        seen = None  # the checks refuse it
    if seen is None:
        _validate(Q, K, V)
    B, H, N, d = Q.shape
    scale = _scale(d, sm_scale)  # any finite > 0: the kernel takes each row's maximum before scaling
    O = torch.empty(Q.shape, dtype=Q.dtype, device=Q.device)
    # the kernel writes LSE only when asked; otherwise O stands in for its pointer
    LSE = torch.empty((B, H, N), dtype=torch.float32, device=Q.device) if return_lse else O
    if O.numel() == 0:
        return (O, LSE) if return_lse else O
    if seen is not None:
        launch.run(arguments_of(seen.cfg), Q, K, V, O, LSE, scale * LOG2E, seen.cfg, causal, return_lse,
                   seen.compiled)
        return (O, LSE) if return_lse else O
    cfg = launch_config(Q, K, V, causal, config)
    _grid(N, B * H, cfg.BLOCK_M)  # one launch must hold every program
    compiled = launch.run(arguments_of(cfg), Q, K, V, O, LSE, scale * LOG2E, cfg, causal, return_lse)
    if key is not None:
        launch.remember(key, launch.Launch(cfg, compiled))
    return (O, LSE) if return_lse else O
