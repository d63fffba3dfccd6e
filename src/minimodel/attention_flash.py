"""Flash-attention forward in Triton (lab 02): `flash_attn_forward(Q, K, V, causal=True)`.

FlashAttention-2 order: one program per (query tile, batch·head); each program keeps its
query tile, the running maximum m, the running sum l and the fp32 output accumulator on chip
while every key/value tile streams past once (the online softmax of theory 02).

Runs on a CUDA device, or on CPU tensors under Triton's interpreter: set TRITON_INTERPRET=1
before this module (or triton) is imported, and the very same kernel source runs in numpy.

    import torch
    from minimodel.attention_flash import flash_attn_forward
    q, k, v = (torch.randn(2, 4, 1024, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    o = flash_attn_forward(q, k, v, causal=True)
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import asdict, dataclass

import torch
import triton
import triton.language as tl

SUPPORTED_HEAD_DIMS = (16, 32, 64, 128, 256)
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x·log2 e)

# Read once: Triton decides at decoration time whether kernels are compiled or interpreted.
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"


@dataclass(frozen=True)
class FwdConfig:
    """Tile sizes and launch parameters of one kernel specialization.

    TMA: load tiles through Hopper's tensor-memory accelerator (host-side tensor descriptors)
    instead of per-thread pointer loads; needs compute capability >= 9 and 16-byte aligned strides.
    WARP_SPECIALIZE: let Triton split the unmasked key loop into producer and consumer warps.
    EXP2_EMULATE: compute half of the exponentials with a cubic polynomial on the FMA units,
    off the special-function units that exp2 queues on.
    SPLIT_M: 2 splits the query tile into two halves with their own softmax state that share
    every key/value tile, two independent chains of matmul and softmax (TMA only).
    """

    BLOCK_M: int
    BLOCK_N: int
    num_warps: int
    num_stages: int
    TMA: bool = False
    WARP_SPECIALIZE: bool = False
    EXP2_EMULATE: bool = False
    SPLIT_M: int = 1
    PREFETCH_QK: bool = False

    def as_dict(self) -> dict:
        return asdict(self)


@functools.cache
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def get_fwd_config(head_dim: int, causal: bool, device_type: str, n: int | None = None,
                   batch_heads: int | None = None, sm_count: int | None = None) -> FwdConfig:
    """The tile configuration for a head dim, causality and problem size on a device type.

    On CUDA: the winners of the H200 search in notes/kernel.md (`python -m minimodel.tune`),
    through TMA, whose use falls back to pointer loads when strides do not allow it. When
    causal 128-row query tiles would give fewer than two programs per multiprocessor (the
    seed's B·H = 8), 64-row tiles double the programs and balance rows of unequal length.
    Small problems take pointer loads: they are launch-bound, and a TMA descriptor costs host
    time at every launch.
    BLOCK_M is a multiple of BLOCK_N, so the causal diagonal of a query tile falls in whole
    key tiles. The interpreter runs one program at a time in numpy, where larger tiles mean
    fewer programs; it takes the seed's 64 × 64 everywhere.
    """
    if device_type != "cuda":
        return FwdConfig(64, 64, 4, 1)
    if head_dim > 128:
        return FwdConfig(64, 32, 4, 2)
    # below ~1 GFLOP-worth of B·H·N²·d a call is launch-bound: skip the TMA descriptors' host cost
    tma = n is None or batch_heads is None or batch_heads * n * n * head_dim > 2**30
    if causal and n is not None and batch_heads is not None and sm_count is not None:
        if batch_heads * triton.cdiv(n, 128) < 2 * sm_count:
            return FwdConfig(64, 64, 4, 3, TMA=tma)
    if head_dim <= 64:
        return FwdConfig(128, 128, 4, 3, TMA=tma)
    if causal and n is not None and n <= 1024:
        return FwdConfig(128, 64, 4, 2, TMA=tma)  # short causal rows: smaller key tiles
    return FwdConfig(128, 128, 8, 3, TMA=tma)


# 2^f on [-1/2, 1/2], cubic fit of least maximum relative error (7.5e-5, below fp16's 4.9e-4)
EXP2_C0, EXP2_C1, EXP2_C2, EXP2_C3 = (tl.constexpr(c) for c in (0.99992807, 0.69326099, 0.24261117,
                                                            0.05517169))
# 1.5·2^23: adding it rounds a float to an integer held in the low mantissa bits
ROUND_MAGIC = tl.constexpr(12582912.0)


@triton.jit
def _exp2_poly(x):
    """2^x for x <= 0 on the FMA units: 2^round(x) in the exponent bits times a cubic in the rest."""
    x = tl.maximum(x, -125.0)  # keeps the exponent field normal: 2^-125 stands in for 0
    j = x + ROUND_MAGIC
    f = x - (j - ROUND_MAGIC)
    p = ((EXP2_C3 * f + EXP2_C2) * f + EXP2_C1) * f + EXP2_C0
    bits = p.to(tl.int32, bitcast=True) + (j.to(tl.int32, bitcast=True) << 23)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _exp2(x, EMULATE: tl.constexpr):
    if EMULATE:  # even columns on the special-function units, odd columns on the FMA units
        BM: tl.constexpr = x.shape[0]
        BN: tl.constexpr = x.shape[1]
        even, odd = tl.split(x.reshape(BM, BN // 2, 2))
        return tl.join(tl.math.exp2(even), _exp2_poly(odd)).reshape(BM, BN)
    else:
        return tl.math.exp2(x)


@triton.jit
def _online_softmax(acc, l_i, m_i, qk, v, cols, offs_m, N, qk_scale,
                    MASKED: tl.constexpr, IS_CAUSAL: tl.constexpr, EMULATE: tl.constexpr = False):
    """Fold one tile of scores Q Kᵀ and its values into the running (acc, l, m) (theory 02).

    Scores go to base 2. qk_scale > 0 (the softmax scale times log2 e), so the row maximum is
    taken before scaling, and the scale and the subtraction of the maximum are one multiply-add.
    """
    if MASKED:  # only the diagonal band and the ragged tail pay for a mask
        valid = cols[None, :] < N
        if IS_CAUSAL:
            valid = valid & (offs_m[:, None] >= cols[None, :])
        qk = tl.where(valid, qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
    p = _exp2(tl.fma(qk, qk_scale, -m_new[:, None]), EMULATE)
    alpha = tl.math.exp2(m_i - m_new)  # rescales what was summed under the old maximum
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    return acc, l_i, m_new


@triton.jit
def _softmax_step(acc, l_i, m_i, q, kt, v, cols, offs_m, N, qk_scale,
                  MASKED: tl.constexpr, IS_CAUSAL: tl.constexpr, EMULATE: tl.constexpr = False):
    """One key/value tile: its scores, then the online softmax."""
    return _online_softmax(acc, l_i, m_i, tl.dot(q, kt), v, cols, offs_m, N, qk_scale,
                           MASKED, IS_CAUSAL, EMULATE)


@triton.jit
def _kv_range(pid_m, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr):
    """Keys [0, lo) need no mask; [lo, hi) hold the causal diagonal band or the ragged tail.

    Causal tiles above the diagonal (keys >= hi) are never loaded.
    """
    if IS_CAUSAL:
        lo = pid_m * BLOCK_M
        hi = tl.minimum((pid_m + 1) * BLOCK_M, N)
    else:
        lo = (N // BLOCK_N) * BLOCK_N
        hi = N
    return lo, hi


@triton.jit
def _program_ids(IS_CAUSAL: tl.constexpr):
    pid_m = tl.program_id(0)
    if IS_CAUSAL:  # the last query tiles have the most keys to visit: start them first
        pid_m = tl.num_programs(0) - 1 - pid_m
    return pid_m, tl.program_id(1)


@triton.jit
def _store_lse(LSE, pid_bh, offs_m, m_i, l_i, N):
    # natural-log log-sum-exp per row, what a backward pass needs
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453
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
    IS_CAUSAL: tl.constexpr, STORE_LSE: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
    EMULATE: tl.constexpr = False,
):
    """Pointer loads with real strides: any layout, any device Triton runs on."""
    pid_m, pid_bh = _program_ids(IS_CAUSAL)
    b = (pid_bh // H).to(tl.int64)
    h = (pid_bh % H).to(tl.int64)
    h_kv = h // GROUP  # grouped-query attention: GROUP query heads share one K/V head

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q_ptrs = Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qn + offs_d[None, :] * stride_qd
    q = tl.load(q_ptrs, mask=offs_m[:, None] < N, other=0.0)
    kt_ptrs = K + b * stride_kb + h_kv * stride_kh + offs_n[None, :] * stride_kn + offs_d[:, None] * stride_kd
    v_ptrs = V + b * stride_vb + h_kv * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    lo, hi = _kv_range(pid_m, N, BLOCK_M, BLOCK_N, IS_CAUSAL)
    for start_n in tl.range(0, lo, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        kt = tl.load(kt_ptrs + start_n * stride_kn)
        v = tl.load(v_ptrs + start_n * stride_vn)
        acc, l_i, m_i = _softmax_step(acc, l_i, m_i, q, kt, v, start_n + offs_n, offs_m, N,
                                      qk_scale, False, IS_CAUSAL, EMULATE)
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        kt = tl.load(kt_ptrs + start_n * stride_kn, mask=cols[None, :] < N, other=0.0)
        v = tl.load(v_ptrs + start_n * stride_vn, mask=cols[:, None] < N, other=0.0)
        acc, l_i, m_i = _softmax_step(acc, l_i, m_i, q, kt, v, cols, offs_m, N,
                                      qk_scale, True, IS_CAUSAL, EMULATE)

    # every row sees key 0, so l_i > 0: no division by zero, no NaN
    acc = acc / l_i[:, None]
    o_ptrs = O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_on + offs_d[None, :] * stride_od
    tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=offs_m[:, None] < N)
    if STORE_LSE:
        _store_lse(LSE, pid_bh, offs_m, m_i, l_i, N)


@triton.jit
def _flash_fwd_kernel_tma(
    desc_q, desc_k, desc_v, desc_o, LSE, qk_scale, H, N, GROUP,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr, STORE_LSE: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
    EMULATE: tl.constexpr = False, PREFETCH_QK: tl.constexpr = False,
):
    """The same algorithm with tiles moved by TMA (4-D descriptors; out-of-range rows read as 0)."""
    pid_m, pid_bh = _program_ids(IS_CAUSAL)
    b = pid_bh // H
    h = pid_bh % H
    h_kv = h // GROUP
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    q = desc_q.load([b, h, pid_m * BLOCK_M, 0]).reshape(BLOCK_M, HEAD_DIM)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    lo, hi = _kv_range(pid_m, N, BLOCK_M, BLOCK_N, IS_CAUSAL)
    if PREFETCH_QK:
        # the scores of tile j+1 are issued before the softmax of tile j, so the tensor cores
        # work while the softmax runs (FlashAttention-3's overlap within a warpgroup)
        if lo > 0:
            qk = tl.dot(q, desc_k.load([b, h_kv, 0, 0]).reshape(BLOCK_N, HEAD_DIM).T)
            for start_n in tl.range(BLOCK_N, lo, BLOCK_N):
                start_n = tl.multiple_of(start_n, BLOCK_N)
                qk_next = tl.dot(q, desc_k.load([b, h_kv, start_n, 0]).reshape(BLOCK_N, HEAD_DIM).T)
                v = desc_v.load([b, h_kv, start_n - BLOCK_N, 0]).reshape(BLOCK_N, HEAD_DIM)
                acc, l_i, m_i = _online_softmax(acc, l_i, m_i, qk, v, start_n + offs_n, offs_m, N,
                                                qk_scale, False, IS_CAUSAL, EMULATE)
                qk = qk_next
            v = desc_v.load([b, h_kv, lo - BLOCK_N, 0]).reshape(BLOCK_N, HEAD_DIM)
            acc, l_i, m_i = _online_softmax(acc, l_i, m_i, qk, v, offs_n, offs_m, N,
                                            qk_scale, False, IS_CAUSAL, EMULATE)
    else:
        for start_n in tl.range(0, lo, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
            start_n = tl.multiple_of(start_n, BLOCK_N)
            kt = desc_k.load([b, h_kv, start_n, 0]).reshape(BLOCK_N, HEAD_DIM).T
            v = desc_v.load([b, h_kv, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
            acc, l_i, m_i = _softmax_step(acc, l_i, m_i, q, kt, v, start_n + offs_n, offs_m, N,
                                          qk_scale, False, IS_CAUSAL, EMULATE)
    for start_n in range(lo, hi, BLOCK_N):
        kt = desc_k.load([b, h_kv, start_n, 0]).reshape(BLOCK_N, HEAD_DIM).T
        v = desc_v.load([b, h_kv, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        acc, l_i, m_i = _softmax_step(acc, l_i, m_i, q, kt, v, start_n + offs_n, offs_m, N,
                                      qk_scale, True, IS_CAUSAL, EMULATE)

    acc = acc / l_i[:, None]
    desc_o.store([b, h, pid_m * BLOCK_M, 0],
                 acc.to(desc_o.dtype).reshape(1, 1, BLOCK_M, HEAD_DIM))
    if STORE_LSE:
        _store_lse(LSE, pid_bh, offs_m, m_i, l_i, N)


@triton.jit
def _flash_fwd_kernel_tma_split(
    desc_q, desc_k, desc_v, desc_o, LSE, qk_scale, H, N, GROUP,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr, STORE_LSE: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
    EMULATE: tl.constexpr = False,
):
    """The TMA kernel with the query tile in two halves sharing each key/value tile."""
    HALF: tl.constexpr = BLOCK_M // 2
    pid_m, pid_bh = _program_ids(IS_CAUSAL)
    b = pid_bh // H
    h = pid_bh % H
    h_kv = h // GROUP
    offs_a = pid_m * BLOCK_M + tl.arange(0, HALF)
    offs_b = offs_a + HALF
    offs_n = tl.arange(0, BLOCK_N)
    qa = desc_q.load([b, h, pid_m * BLOCK_M, 0]).reshape(HALF, HEAD_DIM)
    qb = desc_q.load([b, h, pid_m * BLOCK_M + HALF, 0]).reshape(HALF, HEAD_DIM)

    m_a = tl.full([HALF], float("-inf"), dtype=tl.float32)
    l_a = tl.zeros([HALF], dtype=tl.float32)
    acc_a = tl.zeros([HALF, HEAD_DIM], dtype=tl.float32)
    m_b = tl.full([HALF], float("-inf"), dtype=tl.float32)
    l_b = tl.zeros([HALF], dtype=tl.float32)
    acc_b = tl.zeros([HALF, HEAD_DIM], dtype=tl.float32)
    lo, hi = _kv_range(pid_m, N, BLOCK_M, BLOCK_N, IS_CAUSAL)
    for start_n in tl.range(0, lo, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        kt = desc_k.load([b, h_kv, start_n, 0]).reshape(BLOCK_N, HEAD_DIM).T
        v = desc_v.load([b, h_kv, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        acc_a, l_a, m_a = _softmax_step(acc_a, l_a, m_a, qa, kt, v, start_n + offs_n, offs_a, N,
                                        qk_scale, False, IS_CAUSAL, EMULATE)
        acc_b, l_b, m_b = _softmax_step(acc_b, l_b, m_b, qb, kt, v, start_n + offs_n, offs_b, N,
                                        qk_scale, False, IS_CAUSAL, EMULATE)
    for start_n in range(lo, hi, BLOCK_N):
        kt = desc_k.load([b, h_kv, start_n, 0]).reshape(BLOCK_N, HEAD_DIM).T
        v = desc_v.load([b, h_kv, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
        acc_a, l_a, m_a = _softmax_step(acc_a, l_a, m_a, qa, kt, v, start_n + offs_n, offs_a, N,
                                        qk_scale, True, IS_CAUSAL, EMULATE)
        acc_b, l_b, m_b = _softmax_step(acc_b, l_b, m_b, qb, kt, v, start_n + offs_n, offs_b, N,
                                        qk_scale, True, IS_CAUSAL, EMULATE)

    acc_a = acc_a / l_a[:, None]
    acc_b = acc_b / l_b[:, None]
    desc_o.store([b, h, pid_m * BLOCK_M, 0], acc_a.to(desc_o.dtype).reshape(1, 1, HALF, HEAD_DIM))
    desc_o.store([b, h, pid_m * BLOCK_M + HALF, 0],
                 acc_b.to(desc_o.dtype).reshape(1, 1, HALF, HEAD_DIM))
    if STORE_LSE:
        _store_lse(LSE, pid_bh, offs_a, m_a, l_a, N)
        _store_lse(LSE, pid_bh, offs_b, m_b, l_b, N)


def _tma_ok(*tensors) -> bool:
    """TMA needs unit stride on d and every other stride a multiple of 16 bytes."""
    return all(t.stride(-1) == 1 and all((s * t.element_size()) % 16 == 0 for s in t.stride()[:-1])
               and t.data_ptr() % 16 == 0 for t in tensors)


def default_config(Q: torch.Tensor, causal: bool) -> FwdConfig:
    """The configuration `flash_attn_forward` uses for Q of shape (B, H, N, d) when none is given."""
    B, H, N, d = Q.shape
    on_cuda = Q.device.type == "cuda"
    return get_fwd_config(d, causal, Q.device.type, N, B * H,
                          _sm_count(Q.device.index or 0) if on_cuda else None)


def _validate(Q, K, V) -> None:
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


def flash_attn_forward(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, causal: bool = True,
                       sm_scale: float | None = None, return_lse: bool = False,
                       config: FwdConfig | None = None):
    """Attention softmax(Q Kᵀ · sm_scale) V, without materializing the N × N scores.

    Q: (B, H, N, d); K, V: (B, H_kv, N, d) with H divisible by H_kv (grouped-query and
    multi-query attention; K and V are not copied). float16 or bfloat16, all on one CUDA
    device, or on the CPU under TRITON_INTERPRET=1. d ∈ {16, 32, 64, 128, 256}. Any strides
    (e.g. a transposed (B, N, H, d) tensor) are read as they are.
    causal: query i sees keys j <= i. sm_scale: > 0, defaults to 1/sqrt(d).
    return_lse: also return the natural-log log-sum-exp of each row, (B, H, N) float32.
    config: tile configuration; defaults to `get_fwd_config(d, causal, device, N, B·H, SMs)`.
    Returns O with Q's shape and dtype (contiguous), and LSE when asked.
    """
    _validate(Q, K, V)
    B, H, N, d = Q.shape
    O = torch.empty(Q.shape, dtype=Q.dtype, device=Q.device)
    # the kernel writes LSE only when asked; otherwise O stands in for its pointer
    LSE = torch.empty((B, H, N), dtype=torch.float32, device=Q.device) if return_lse else O
    if O.numel() == 0:
        return (O, LSE) if return_lse else O
    scale = 1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)
    if not (math.isfinite(scale) and scale > 0):  # the kernel takes each row's maximum before scaling
        raise ValueError(f"sm_scale must be a finite number > 0, got {sm_scale!r}")
    cfg = config or default_config(Q, causal)
    grid = (triton.cdiv(N, cfg.BLOCK_M), B * H)
    common = dict(HEAD_DIM=d, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, IS_CAUSAL=bool(causal),
                  STORE_LSE=bool(return_lse), WARP_SPECIALIZE=cfg.WARP_SPECIALIZE,
                  EMULATE=cfg.EXP2_EMULATE,
                  num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    if cfg.SPLIT_M not in (1, 2) or (cfg.SPLIT_M == 2 and not cfg.TMA):
        raise ValueError(f"SPLIT_M={cfg.SPLIT_M}: accepted 1, or 2 with TMA")
    if cfg.TMA and _tma_ok(Q, K, V):
        from triton.tools.tensor_descriptor import TensorDescriptor

        def desc(t, rows):
            return TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, rows, d])

        rows_q = cfg.BLOCK_M // cfg.SPLIT_M
        kernel = _flash_fwd_kernel_tma_split if cfg.SPLIT_M == 2 else _flash_fwd_kernel_tma
        extra = {"PREFETCH_QK": cfg.PREFETCH_QK} if cfg.SPLIT_M == 1 else {}
        kernel[grid](
            desc(Q, rows_q), desc(K, cfg.BLOCK_N), desc(V, cfg.BLOCK_N), desc(O, rows_q),
            LSE, scale * LOG2E, H, N, H // K.shape[1], **common, **extra,
        )
    else:
        _flash_fwd_kernel[grid](
            Q, K, V, O, LSE, scale * LOG2E,
            *Q.stride(), *K.stride(), *V.stride(), *O.stride(),
            H, N, H // K.shape[1], **common,
        )
    return (O, LSE) if return_lse else O
