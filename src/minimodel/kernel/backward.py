"""Flash-attention backward in Triton: `flash_attn_backward(q, k, v, o, lse, do, causal, sm_scale)`.

FlashAttention-2's Algorithm 2 in three launches, none with atomics: every gradient is the same
bit for bit from run to run.
1. `_bwd_preprocess`: D = rowsum(dO ∘ O), one float32 per query row.
2. `_bwd_dkdv_kernel`: one program per (key tile, batch, K/V head), its K, V tiles and float32 dK,
   dV on chip while every query tile of every query head of its group streams past (dK and dV
   summed over the group in the program, in a fixed order). Per query tile, S = scale·Q Kᵀ:
       P = exp(S − LSE),  dV += Pᵀ dO,  dP = dO Vᵀ,  dS = P ∘ (dP − D),  dK += dSᵀ Q.
3. `_bwd_dq_kernel`: one program per (query tile, batch·head), key tiles streaming past: dQ += dS K
   (a pass of its own: it recomputes P once more and writes dQ once, without atomics).
On Hopper launch 2 may be the warp-specialized Gluon kernel (`BwdConfig.dkdv` "gluon_ws"), and
launch 3 the Gluon dQ pass (`dq` "gluon_pass") or none, dQ then added in launch 2 by TMA reductions
(`dq` "in_kernel", not deterministic). dQ = scale · dS K, dK = scale · dSᵀ Q.

LSE is the forward's natural-log log-sum-exp, (B, H, N) float32. The kernels work in base 2,
P = exp2(q·k · scale·log2 e − LSE · log2 e): the scale is multiplied in before LSE is subtracted,
fine for any scale a model uses (the forward's any-finite-scale guarantee is the forward's alone).
Programs and 64-bit offsets as in the forward (`flash`); CUDA, or CPU tensors under the interpreter.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from minimodel.kernel import flash, gluon_bwd_dqpass, gluon_bwd_ws
from minimodel.kernel.config import BwdConfig
from minimodel.kernel.flash import _kv_range, _program_ids
from minimodel.kernel.inputs import scale as _scale
from minimodel.kernel.inputs import validate_backward as _validate
from minimodel.kernel.launch import LOG2E, launch_bwd_config
from minimodel.kernel.launch import grid as _grid

_LOG2E = tl.constexpr(LOG2E)  # the kernels turn the forward's natural-log LSE into base 2


@triton.jit
def _bwd_preprocess(O, DO, Delta,
                    stride_ob, stride_oh, stride_on, stride_od,
                    stride_dob, stride_doh, stride_don, stride_dod,
                    H, N, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    """D = rowsum(dO ∘ O) in float32, for BLOCK_M rows of one (batch, head)."""
    pid_m, pid_bh = _program_ids(N, BLOCK_M, False)
    b = (pid_bh // H).to(tl.int64)
    h = (pid_bh % H).to(tl.int64)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rows = offs_m.to(tl.int64)[:, None]
    offs_d = tl.arange(0, HEAD_DIM).to(tl.int64)[None, :]
    in_range = offs_m[:, None] < N
    o = tl.load(O + b * stride_ob + h * stride_oh + rows * stride_on + offs_d * stride_od,
                mask=in_range, other=0.0)
    do = tl.load(DO + b * stride_dob + h * stride_doh + rows * stride_don + offs_d * stride_dod,
                 mask=in_range, other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(Delta + pid_bh.to(tl.int64) * N + offs_m, delta, mask=offs_m < N)


@triton.jit
def _dkdv_step(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptr, delta_ptr, start_m, offs_m0, offs_n, N, qk_scale,
               stride_qn, stride_don, MASKED: tl.constexpr, IS_CAUSAL: tl.constexpr):
    """One query tile against this program's key tile, in transposed form (keys as rows)."""
    offs_m = start_m + offs_m0
    row = tl.cast(start_m, tl.int64)
    if MASKED:  # the causal diagonal band and the ragged tail: rows past N read as zeros
        in_range = offs_m < N
        q = tl.load(q_ptrs + row * stride_qn, mask=in_range[:, None], other=0.0)
        do = tl.load(do_ptrs + row * stride_don, mask=in_range[:, None], other=0.0)
        lse = tl.load(lse_ptr + offs_m, mask=in_range, other=0.0)
        delta = tl.load(delta_ptr + offs_m, mask=in_range, other=0.0)
    else:
        q = tl.load(q_ptrs + row * stride_qn)
        do = tl.load(do_ptrs + row * stride_don)
        lse = tl.load(lse_ptr + offs_m)
        delta = tl.load(delta_ptr + offs_m)
    st = tl.dot(k, tl.trans(q))  # Sᵀ before scaling: (BLOCK_N, BLOCK_M)
    pt = tl.math.exp2(st * qk_scale - (lse * _LOG2E)[None, :])
    if MASKED:
        valid = in_range[None, :]
        if IS_CAUSAL:
            valid = valid & (offs_m[None, :] >= offs_n[:, None])
        pt = tl.where(valid, pt, 0.0)
    dv = tl.dot(pt.to(do.dtype), do, dv)
    dpt = tl.dot(v, tl.trans(do))
    dst = pt * (dpt - delta[None, :])
    dk = tl.dot(dst.to(q.dtype), q, dk)
    return dk, dv


@triton.jit
def _bwd_dkdv_kernel(
    Q, K, V, DO, DK, DV, LSE, Delta, qk_scale, sm_scale,
    stride_qb, stride_qh, stride_qn, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_dob, stride_doh, stride_don, stride_dod,
    stride_dkb, stride_dkh, stride_dkn, stride_dkd,
    stride_dvb, stride_dvh, stride_dvn, stride_dvd,
    H, H_KV, N, GROUP,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr,
):
    """dK, dV of BLOCK_N keys of one (batch, K/V head), summed over the GROUP query heads."""
    num_n = tl.cdiv(N, BLOCK_N)
    pid = tl.program_id(0)
    pid_n = pid % num_n  # causal: the first key tiles have the most query tiles, and start first
    pid_bkv = pid // num_n
    b = (pid_bkv // H_KV).to(tl.int64)
    h_kv = (pid_bkv % H_KV).to(tl.int64)

    start_n = pid_n * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    rows_n = offs_n.to(tl.int64)[:, None]
    offs_d = tl.arange(0, HEAD_DIM).to(tl.int64)[None, :]
    kv_in_range = offs_n[:, None] < N
    k = tl.load(K + b * stride_kb + h_kv * stride_kh + rows_n * stride_kn + offs_d * stride_kd,
                mask=kv_in_range, other=0.0)
    v = tl.load(V + b * stride_vb + h_kv * stride_vh + rows_n * stride_vn + offs_d * stride_vd,
                mask=kv_in_range, other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)

    # query rows [lo, band) meet the causal diagonal; [band, full) need no mask; [full, N) is the
    # ragged tail. Causal query rows before start_n see none of these keys and are skipped.
    if IS_CAUSAL:
        lo = start_n
        band = tl.minimum(start_n + BLOCK_N, N)
    else:
        lo = 0
        band = 0
    full = tl.maximum(band, (N // BLOCK_M) * BLOCK_M)
    offs_m0 = tl.arange(0, BLOCK_M)
    rows_m0 = offs_m0.to(tl.int64)[:, None]
    for g in range(GROUP):  # in order: the same sum every run
        h = h_kv * GROUP + g
        q_ptrs = Q + b * stride_qb + h * stride_qh + rows_m0 * stride_qn + offs_d * stride_qd
        do_ptrs = DO + b * stride_dob + h * stride_doh + rows_m0 * stride_don + offs_d * stride_dod
        lse_ptr = LSE + (b * H + h) * N
        delta_ptr = Delta + (b * H + h) * N
        for start_m in range(lo, band, BLOCK_M):
            dk, dv = _dkdv_step(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptr, delta_ptr, start_m, offs_m0, offs_n,
                                N, qk_scale, stride_qn, stride_don, True, IS_CAUSAL)
        for start_m in range(band, full, BLOCK_M):
            start_m = tl.multiple_of(start_m, BLOCK_M)
            dk, dv = _dkdv_step(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptr, delta_ptr, start_m, offs_m0, offs_n,
                                N, qk_scale, stride_qn, stride_don, False, IS_CAUSAL)
        for start_m in range(full, N, BLOCK_M):
            dk, dv = _dkdv_step(dk, dv, k, v, q_ptrs, do_ptrs, lse_ptr, delta_ptr, start_m, offs_m0, offs_n,
                                N, qk_scale, stride_qn, stride_don, True, IS_CAUSAL)

    dk = dk * sm_scale
    tl.store(DK + b * stride_dkb + h_kv * stride_dkh + rows_n * stride_dkn + offs_d * stride_dkd,
             dk.to(DK.dtype.element_ty), mask=kv_in_range)
    tl.store(DV + b * stride_dvb + h_kv * stride_dvh + rows_n * stride_dvn + offs_d * stride_dvd,
             dv.to(DV.dtype.element_ty), mask=kv_in_range)


@triton.jit
def _dq_step(dq, q, do, lse, delta, k_ptrs, v_ptrs, start_n, offs_n0, offs_m, N, qk_scale,
             stride_kn, stride_vn, MASKED: tl.constexpr, IS_CAUSAL: tl.constexpr):
    """One key tile against this program's query tile."""
    cols = start_n + offs_n0
    row = tl.cast(start_n, tl.int64)
    if MASKED:
        k = tl.load(k_ptrs + row * stride_kn, mask=cols[:, None] < N, other=0.0)
        vt = tl.load(v_ptrs + row * stride_vn, mask=cols[None, :] < N, other=0.0)
    else:
        k = tl.load(k_ptrs + row * stride_kn)
        vt = tl.load(v_ptrs + row * stride_vn)
    s = tl.dot(q, tl.trans(k))
    p = tl.math.exp2(s * qk_scale - lse[:, None])
    if MASKED:
        valid = cols[None, :] < N
        if IS_CAUSAL:
            valid = valid & (offs_m[:, None] >= cols[None, :])
        p = tl.where(valid, p, 0.0)
    dp = tl.dot(do, vt)
    ds = p * (dp - delta[:, None])
    return tl.dot(ds.to(k.dtype), k, dq)


@triton.jit
def _bwd_dq_kernel(
    Q, K, V, DO, DQ, LSE, Delta, qk_scale, sm_scale,
    stride_qb, stride_qh, stride_qn, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_dob, stride_doh, stride_don, stride_dod,
    stride_dqb, stride_dqh, stride_dqn, stride_dqd,
    H, N, GROUP,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr,
):
    """dQ of BLOCK_M queries of one (batch, head): every key tile it sees streams past once."""
    pid_m, pid_bh = _program_ids(N, BLOCK_M, IS_CAUSAL)
    b = (pid_bh // H).to(tl.int64)
    h = (pid_bh % H).to(tl.int64)
    h_kv = h // GROUP

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rows_m = offs_m.to(tl.int64)[:, None]
    offs_d = tl.arange(0, HEAD_DIM).to(tl.int64)
    in_range = offs_m < N
    q = tl.load(Q + b * stride_qb + h * stride_qh + rows_m * stride_qn + offs_d[None, :] * stride_qd,
                mask=in_range[:, None], other=0.0)
    do = tl.load(DO + b * stride_dob + h * stride_doh + rows_m * stride_don + offs_d[None, :] * stride_dod,
                 mask=in_range[:, None], other=0.0)
    row_base = pid_bh.to(tl.int64) * N
    lse = tl.load(LSE + row_base + offs_m, mask=in_range, other=0.0) * _LOG2E
    delta = tl.load(Delta + row_base + offs_m, mask=in_range, other=0.0)

    offs_n0 = tl.arange(0, BLOCK_N)
    rows_n0 = offs_n0.to(tl.int64)
    k_ptrs = K + b * stride_kb + h_kv * stride_kh + rows_n0[:, None] * stride_kn + offs_d[None, :] * stride_kd
    v_ptrs = V + b * stride_vb + h_kv * stride_vh + rows_n0[None, :] * stride_vn + offs_d[:, None] * stride_vd
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    lo, hi = _kv_range(pid_m, N, BLOCK_M, BLOCK_N, IS_CAUSAL)
    for start_n in range(0, lo, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        dq = _dq_step(dq, q, do, lse, delta, k_ptrs, v_ptrs, start_n, offs_n0, offs_m, N, qk_scale,
                      stride_kn, stride_vn, False, IS_CAUSAL)
    for start_n in range(lo, hi, BLOCK_N):
        dq = _dq_step(dq, q, do, lse, delta, k_ptrs, v_ptrs, start_n, offs_n0, offs_m, N, qk_scale,
                      stride_kn, stride_vn, True, IS_CAUSAL)

    dq = dq * sm_scale
    tl.store(DQ + b * stride_dqb + h * stride_dqh + rows_m * stride_dqn + offs_d[None, :] * stride_dqd,
             dq.to(DQ.dtype.element_ty), mask=in_range[:, None])


def _strides(prefix: str, t: torch.Tensor) -> dict:
    return {f"stride_{prefix}{axis}": s for axis, s in zip("bhnd", t.stride(), strict=True)}


def arguments(q, k, v, o, lse, do, dq, dk, dv, delta, scale: float, cfg: BwdConfig, causal: bool):
    """[(kernel, grid, arguments, launch options)] of the launches, in order: what
    `flash_attn_backward` runs, and what a compile for a GPU without one specializes on: the
    preprocess, the dK/dV kernel (`cfg.dkdv`), and the dQ pass (`cfg.dq`; none with "in_kernel",
    where dq is the zeroed float32 accumulator the dK/dV kernel adds to; else dq in q's dtype)."""
    B, H, N, d = q.shape
    H_kv, qk_scale = k.shape[1], scale * LOG2E
    pre = dict(O=o, DO=do, Delta=delta, **_strides("o", o), **_strides("do", do), H=H, N=N,
               HEAD_DIM=d, BLOCK_M=cfg.preprocess_rows)
    launches = [(_bwd_preprocess, _grid(N, B * H, cfg.preprocess_rows), pre, dict(num_warps=4, num_stages=1))]
    common = dict(qk_scale=qk_scale, sm_scale=scale, **_strides("q", q), **_strides("k", k),
                  **_strides("v", v), **_strides("do", do), HEAD_DIM=d, IS_CAUSAL=bool(causal))
    if cfg.dkdv == "gluon_ws":
        launches.append(gluon_bwd_ws.dkdv_launch(q, k, v, do, dq, dk, dv, lse, delta, scale, cfg, causal))
    else:
        dkdv = dict(Q=q, K=k, V=v, DO=do, DK=dk, DV=dv, LSE=lse, Delta=delta, **common, **_strides("dk", dk),
                    **_strides("dv", dv), H=H, H_KV=H_kv, N=N, GROUP=H // H_kv, BLOCK_M=cfg.BLOCK_M1,
                    BLOCK_N=cfg.BLOCK_N1)
        launches.append((_bwd_dkdv_kernel, _grid(N, B * H_kv, cfg.BLOCK_N1), dkdv,
                         dict(num_warps=cfg.num_warps_kv, num_stages=cfg.num_stages_kv)))
    if cfg.dq == "gluon_pass":
        launches.append(gluon_bwd_dqpass.config_launch(q, k, v, do, dq, lse, delta, scale, cfg, causal))
    elif cfg.dq == "tl_pass":
        dqa = dict(Q=q, K=k, V=v, DO=do, DQ=dq, LSE=lse, Delta=delta, **common, **_strides("dq", dq),
                   H=H, N=N, GROUP=H // H_kv, BLOCK_M=cfg.BLOCK_M2, BLOCK_N=cfg.BLOCK_N2)
        launches.append((_bwd_dq_kernel, _grid(N, B * H, cfg.BLOCK_M2), dqa,
                         dict(num_warps=cfg.num_warps_q, num_stages=cfg.num_stages_q)))
    return launches


def flash_attn_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                        lse: torch.Tensor, do: torch.Tensor, causal: bool = False,
                        sm_scale: float | None = None, config: BwdConfig | None = None,
                        deterministic: bool = True):
    """(dQ, dK, dV) of attention softmax(Q Kᵀ · sm_scale) V at the output gradient dO.

    q, k, v, do: shapes, dtypes, head dims and devices as the forward takes them (dK and dV summed
    over the H / H_kv query heads sharing a K/V head), any strides (broadcast dO included). o, lse:
    `flash_attn_forward(q, k, v, causal, sm_scale, return_lse=True)` (a non-contiguous LSE is
    copied). causal (default False, as in SDPA and FlashAttention) and sm_scale must be the forward's.
    config: kernels and tiles (`BwdConfig`); defaults to `launch.default_bwd_config`; what runs is
    `launch_bwd_config(q, k, v, causal, config, do, deterministic)` (gluon_ws runs the tl table's
    where the Gluon kernels cannot). deterministic (default True): the same bits on every call;
    False lets the default add dQ in the dK/dV kernel where that is faster (Hopper, N >= 1024, by
    TMA reductions whose order varies); ignored under `torch.use_deterministic_algorithms(True)`
    and when `config` is given. Returns dQ, dK, dV, contiguous, in the shapes and dtype of q, k, v.
    """
    _validate(q, k, v, o, lse, do)
    B, H, N, d = q.shape
    scale = _scale(d, sm_scale)
    if q.numel() == 0 or k.numel() == 0:
        return tuple(torch.zeros(t.shape, dtype=t.dtype, device=t.device) for t in (q, k, v))
    cfg = launch_bwd_config(q, k, v, causal, config, do, deterministic)
    q, k, v, o, do = (t.detach() for t in (q, k, v, o, do))
    lse = lse.detach().contiguous()
    if cfg.dq == "in_kernel":
        dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    else:
        dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    delta = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
    for kernel, grid, args, options in arguments(q, k, v, o, lse, do, dq, dk, dv, delta, scale, cfg, causal):
        kernel[grid](**args, **options)
    return (dq.to(q.dtype) if cfg.dq == "in_kernel" else dq), dk, dv


def backward_fn(q, k, v, causal: bool, sm_scale: float | None = None, do: torch.Tensor | None = None,
                config: BwdConfig | None = None, generator: torch.Generator | None = None):
    """The backward alone, as a timing loop wants it: runs the forward once (O and LSE saved),
    draws dO (standard normal, unless given) and returns a call with no arguments that runs
    `flash_attn_backward` on them and returns (dQ, dK, dV)."""
    with torch.no_grad():
        o, lse = flash.flash_attn_forward(q.detach(), k.detach(), v.detach(), causal=causal,
                                          sm_scale=sm_scale, return_lse=True)
    if do is None:
        do = torch.randn(q.shape, generator=generator, device="cpu").to(device=q.device, dtype=q.dtype)
    return lambda: flash_attn_backward(q, k, v, o, lse, do, causal, sm_scale, config)
