"""Flash-attention forward for Hopper (sm_90) in Gluon, scheduled like FlashAttention-3.

One program per (query tile, batch·head). Inside it, warp specialization:
- `_load`, the producer (the default partition; its registers go to the consumers): Q once,
  then every K and V tile through TMA into a ring of shared-memory stages;
- `_consume`, CONSUMERS warpgroups with many registers, each owning BLOCK_M rows of the query
  tile. Every key tile is read by all of them from the same stage.
Two overlaps hide the softmax behind the tensor cores:
- inside a consumer, QKᵀ of tile j + 1 is issued before the softmax of tile j finishes
  (the GEMM runs asynchronously while the exponentials are computed);
- between consumers, a pair of mbarriers hands the tensor cores from one warpgroup to the
  other (PINGPONG): one issues its GEMMs while the other does its softmax.
The softmax follows the tl kernel's (`flash._softmax_step`) step for step: scores in base 2, the
raw row maximum subtracted before scaling, so any finite sm_scale gives the float64 answer, never
NaN. It is written out again in `_consume`, not shared: `_softmax_step` issues its two matmuls
and the softmax as one step, while here the softmax of tile j runs between the asynchronous QKᵀ
of tile j and PV of tile j − 1, each GEMM waited for where the overlap allows.

Gluon has no interpreter: the kernel runs only on a CUDA device of compute capability 9.0,
compiled (`flash._gluon_ok`), or is compiled for sm_90 on the CPU by tools. Defining it needs
neither, so `flash` imports this module wherever it is imported; both take what their launches
share from `launch`.
"""

from __future__ import annotations

import functools

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from minimodel.kernel.config import GLUON_HEAD_DIMS
from minimodel.kernel.launch import LN2, HostDescriptor


@gluon.jit
def _kv_tiles(pid_m, N, BLOCK_Q: gl.constexpr, BLOCK_N: gl.constexpr, IS_CAUSAL: gl.constexpr):
    """Key tiles [0, full) need no mask; [full, total) hold the causal diagonal or the ragged tail."""
    if IS_CAUSAL:
        full = (pid_m * BLOCK_Q) // BLOCK_N
        total = gl.cdiv(gl.minimum((pid_m + 1) * BLOCK_Q, N), BLOCK_N)
    else:
        full = N // BLOCK_N
        total = gl.cdiv(N, BLOCK_N)
    return full, total


@gluon.jit
def _stage(j, STAGES: gl.constexpr):
    """The K/V buffer (and barrier) of key tile j in the ring of STAGES."""
    return j % STAGES


@gluon.jit
def _phase(j, STAGES: gl.constexpr):
    """The phase in which key tile j completes its stage's barriers: a stage's barriers complete
    once per pass over the ring, so the phase flips with each pass (0 on the first)."""
    return (j // STAGES) & 1


@gluon.jit
def _load(q_desc, k_desc, v_desc, smem, bars, b, h, h_kv, pid_m, N, CONSUMERS: gl.constexpr,
          BLOCK_N: gl.constexpr, STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr):
    """Producer: each consumer's Q rows once, then K and V of each key tile into stage
    j % STAGES once it is free.

    K and V have their own barriers, so QKᵀ may start while V is still in flight. Rows past N
    (a ragged tail) arrive as zeros: the descriptors are 4-D, bounded per head.
    """
    q_smem, k_smem, v_smem = smem
    q_ready, k_ready, v_ready, k_empty, v_empty, _ = bars
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[2]
    BLOCK_Q: gl.constexpr = BLOCK_M * CONSUMERS
    mbarrier.expect(q_ready, CONSUMERS * q_desc.block_type.nbytes)
    for c in gl.static_range(CONSUMERS):
        tma.async_copy_global_to_shared(q_desc, [b, h, pid_m * BLOCK_Q + c * BLOCK_M, 0], q_ready,
                                        q_smem.index(c))
    _, total = _kv_tiles(pid_m, N, BLOCK_Q, BLOCK_N, IS_CAUSAL)
    for j in range(total):
        s = _stage(j, STAGES)
        # the consumers released this stage's previous tile in the phase before; on the first
        # pass the fresh barriers count as free
        free = _phase(j, STAGES) ^ 1
        mbarrier.wait(k_empty.index(s), free)
        mbarrier.expect(k_ready.index(s), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [b, h_kv, j * BLOCK_N, 0], k_ready.index(s), k_smem.index(s))
        mbarrier.wait(v_empty.index(s), free)
        mbarrier.expect(v_ready.index(s), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [b, h_kv, j * BLOCK_N, 0], v_ready.index(s), v_smem.index(s))


@gluon.jit
def _mask(s, j, full, rows, N, BLOCK_N: gl.constexpr, IS_CAUSAL: gl.constexpr):
    """−∞ where a key is past N or (causal) after the query; only tiles from `full` on pay."""
    if j >= full:
        cols = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s.type.layout))
        cols2 = gl.expand_dims(cols, 0)
        valid = cols2 < N
        if IS_CAUSAL:
            valid = valid & (gl.expand_dims(rows, 1) >= cols2)
        s = gl.where(valid, s, float("-inf"))
    return s


@gluon.jit
def _wait_turn(turns, t, WG: gl.constexpr, PINGPONG: gl.constexpr):
    """Block until the previous consumer has issued its GEMMs of step t (consumer 0 goes first).

    turns[i] completes a phase each time consumer i − 1 (cyclically) hands over: consumer 0
    waits for phase t − 1 (t = 0 passes on the fresh barrier), the others for phase t.
    """
    if PINGPONG:
        mbarrier.wait(turns.index(WG), (t & 1) ^ (WG == 0))


@gluon.jit
def _pass_turn(turns, WG: gl.constexpr, CONSUMERS: gl.constexpr, PINGPONG: gl.constexpr):
    if PINGPONG:
        mbarrier.arrive(turns.index((WG + 1) % CONSUMERS), count=1)


@gluon.jit
def _consume(smem, bars, o_desc, lse_ptr, b, h, pid_m, pid_bh, N, qk_scale, WG: gl.constexpr,
             CONSUMERS: gl.constexpr,
             BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr,
             IS_CAUSAL: gl.constexpr, PINGPONG: gl.constexpr, STORE_LSE: gl.constexpr):
    """Consumer warpgroup WG: rows [WG·BLOCK_M, (WG+1)·BLOCK_M) of the query tile.

    Step j issues QKᵀ of tile j and PV of tile j − 1 back to back, then computes the softmax of
    tile j while PV runs, so the tensor cores and the exponentials overlap within the warpgroup.
    """
    q_smem, k_smem, v_smem = smem
    q_ready, k_ready, v_ready, k_empty, v_empty, turns = bars
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    BLOCK_Q: gl.constexpr = BLOCK_M * CONSUMERS
    dtype: gl.constexpr = q_smem.dtype

    full, total = _kv_tiles(pid_m, N, BLOCK_Q, BLOCK_N, IS_CAUSAL)
    rows = pid_m * BLOCK_Q + WG * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    q = q_smem.index(WG)
    mbarrier.wait(q_ready, 0)

    # step 0: QKᵀ of the first key tile alone (every row sees key 0: its maximum is finite)
    mbarrier.wait(k_ready.index(0), 0)
    _wait_turn(turns, 0, WG, PINGPONG)
    s = warpgroup_mma(q, k_smem.index(0).permute((1, 0)), gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout),
                      use_acc=False, is_async=True)
    _pass_turn(turns, WG, CONSUMERS, PINGPONG)
    s = warpgroup_mma_wait(0, deps=[s])
    mbarrier.arrive(k_empty.index(0), count=1)
    s = _mask(s, 0, full, rows, N, BLOCK_N, IS_CAUSAL)
    m_i = gl.max(s, 1)
    p = gl.exp2((s - gl.expand_dims(m_i, 1)) * qk_scale)
    l_i = gl.sum(p, 1)
    alpha = gl.full([BLOCK_M], 1.0, gl.float32, gl.SliceLayout(1, s_layout))
    acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, o_layout)

    for j in range(1, total):
        st = _stage(j, STAGES)
        prev = _stage(j - 1, STAGES)
        p16 = gl.convert_layout(p.to(dtype), p_layout)
        mbarrier.wait(k_ready.index(st), _phase(j, STAGES))
        _wait_turn(turns, j, WG, PINGPONG)
        s = warpgroup_mma(q, k_smem.index(st).permute((1, 0)),
                          gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout), use_acc=False, is_async=True)
        # while QKᵀ runs: bring O to the maximum that P of tile j − 1 was taken under
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
        mbarrier.wait(v_ready.index(prev), _phase(j - 1, STAGES))
        acc = warpgroup_mma(p16, v_smem.index(prev), acc, is_async=True)
        _pass_turn(turns, WG, CONSUMERS, PINGPONG)
        s = warpgroup_mma_wait(1, deps=[s])  # QKᵀ done; PV may still run
        mbarrier.arrive(k_empty.index(st), count=1)
        s = _mask(s, j, full, rows, N, BLOCK_N, IS_CAUSAL)
        m_new = gl.maximum(m_i, gl.max(s, 1))
        alpha = gl.exp2((m_i - m_new) * qk_scale)  # rescales what was summed under the old maximum
        p = gl.exp2((s - gl.expand_dims(m_new, 1)) * qk_scale)
        l_i = l_i * alpha + gl.sum(p, 1)
        m_i = m_new
        acc, p16 = warpgroup_mma_wait(0, deps=[acc, p16])
        mbarrier.arrive(v_empty.index(prev), count=1)

    last = _stage(total - 1, STAGES)
    p16 = gl.convert_layout(p.to(dtype), p_layout)
    acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
    mbarrier.wait(v_ready.index(last), _phase(total - 1, STAGES))
    acc = warpgroup_mma(p16, v_smem.index(last), acc, is_async=True)
    acc, p16 = warpgroup_mma_wait(0, deps=[acc, p16])
    mbarrier.arrive(v_empty.index(last), count=1)

    acc = acc / gl.expand_dims(gl.convert_layout(l_i, gl.SliceLayout(1, o_layout)), 1)
    # O leaves through TMA from this consumer's Q buffer, free since its last QKᵀ completed;
    # the 4-D descriptor drops rows past N
    q.store(acc.to(dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(o_desc, [b, h, pid_m * BLOCK_Q + WG * BLOCK_M, 0], q)
    tma.store_wait(0)
    if STORE_LSE:
        # natural-log log-sum-exp per row, what a backward pass needs (m_i is the raw maximum)
        lse = (m_i * qk_scale + gl.log2(l_i)) * LN2
        gl.store(lse_ptr + pid_bh.to(gl.int64) * N + rows, lse, mask=rows < N)


# H, N and GROUP are not specialized on their values, so that one compiled kernel serves every
# call with the same constexprs and dtype
@gluon.jit(do_not_specialize=["H", "N", "GROUP"])
def _flash_fwd_hopper(q_desc, k_desc, v_desc, o_desc, lse_ptr, qk_scale, H, N, GROUP,
                      HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                      CONSUMERS: gl.constexpr, STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr,
                      PINGPONG: gl.constexpr, STORE_LSE: gl.constexpr, CONSUMER_REGS: gl.constexpr):
    """One program per (query tile of CONSUMERS·BLOCK_M rows, batch·head), on the grid's x axis.

    Barriers (all in shared memory, initialised here):
    - q_ready: the producer's TMA completes it when Q has landed; every consumer waits once;
    - k_ready[s], v_ready[s]: TMA completes them when stage s holds K (V) of a key tile;
    - k_empty[s], v_empty[s]: each consumer arrives when its QKᵀ (PV) of stage s has completed
      (count CONSUMERS); the producer waits on them before reusing the stage's K (V) buffer;
    - turns[i]: consumer i − 1 arrives after issuing its GEMMs; consumer i waits before its own.
    """
    BLOCK_Q: gl.constexpr = BLOCK_M * CONSUMERS
    num_m = gl.cdiv(N, BLOCK_Q)
    pid = gl.program_id(0)
    pid_m = pid % num_m
    if IS_CAUSAL:  # the last query tiles have the most keys to visit: start them first
        pid_m = num_m - 1 - pid_m
    pid_bh = pid // num_m
    b = pid_bh // H
    h = pid_bh % H
    h_kv = h // GROUP  # grouped-query attention: GROUP query heads share one K/V head

    dtype: gl.constexpr = q_desc.dtype
    q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, HEAD_DIM], dtype)
    kv_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, HEAD_DIM], dtype)
    q_smem = gl.allocate_shared_memory(dtype, [CONSUMERS, BLOCK_M, HEAD_DIM], q_layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], kv_layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], kv_layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turns = gl.allocate_shared_memory(gl.int64, [CONSUMERS, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_ready, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=CONSUMERS)
        mbarrier.init(v_empty.index(i), count=CONSUMERS)
    for i in gl.static_range(CONSUMERS):
        mbarrier.init(turns.index(i), count=1)

    smem = (q_smem, k_smem, v_smem)
    bars = (q_ready, k_ready, v_ready, k_empty, v_empty, turns)
    gl.static_assert((CONSUMERS == 2) | (CONSUMERS == 3), "the kernel has two or three consumer warpgroups")
    # a JITFunction cannot be held in a variable inside the kernel: each count of consumers has
    # its own list
    if CONSUMERS == 2:
        gl.warp_specialize([
            (_load, (q_desc, k_desc, v_desc, smem, bars, b, h, h_kv, pid_m, N, CONSUMERS, BLOCK_N, STAGES,
                     IS_CAUSAL)),
            (_consume, (smem, bars, o_desc, lse_ptr, b, h, pid_m, pid_bh, N, qk_scale, 0, CONSUMERS, BLOCK_M,
                    BLOCK_N, HEAD_DIM, STAGES, IS_CAUSAL, PINGPONG, STORE_LSE)),
            (_consume, (smem, bars, o_desc, lse_ptr, b, h, pid_m, pid_bh, N, qk_scale, 1, CONSUMERS, BLOCK_M,
                    BLOCK_N, HEAD_DIM, STAGES, IS_CAUSAL, PINGPONG, STORE_LSE)),
        ], [4, 4], [CONSUMER_REGS, CONSUMER_REGS])
    else:
        gl.warp_specialize([
            (_load, (q_desc, k_desc, v_desc, smem, bars, b, h, h_kv, pid_m, N, CONSUMERS, BLOCK_N, STAGES,
                     IS_CAUSAL)),
            (_consume, (smem, bars, o_desc, lse_ptr, b, h, pid_m, pid_bh, N, qk_scale, 0, CONSUMERS, BLOCK_M,
                    BLOCK_N, HEAD_DIM, STAGES, IS_CAUSAL, PINGPONG, STORE_LSE)),
            (_consume, (smem, bars, o_desc, lse_ptr, b, h, pid_m, pid_bh, N, qk_scale, 1, CONSUMERS, BLOCK_M,
                    BLOCK_N, HEAD_DIM, STAGES, IS_CAUSAL, PINGPONG, STORE_LSE)),
            (_consume, (smem, bars, o_desc, lse_ptr, b, h, pid_m, pid_bh, N, qk_scale, 2, CONSUMERS, BLOCK_M,
                    BLOCK_N, HEAD_DIM, STAGES, IS_CAUSAL, PINGPONG, STORE_LSE)),
        ], [4, 4, 4], [CONSUMER_REGS, CONSUMER_REGS, CONSUMER_REGS])


_GL_DTYPES = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}
# registers per consumer thread after setmaxnreg, by the number of consumer warpgroups (the
# producer's warpgroup gives its share away): 2 · 128 · 240 + 128 · 24 and 3 · 128 · 160 + 128 · 32
# both fit the multiprocessor's 65,536
CONSUMER_REGS = {2: 240, 3: 160}


def supports(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor) -> bool:
    """Whether this kernel can read these inputs: a head dim it is built for, and tensors TMA can
    address (unit stride on d, every other stride a positive multiple of 16 bytes, 16-byte aligned
    base; a size-1 dimension's stride does not matter)."""
    if Q.shape[-1] not in GLUON_HEAD_DIMS or Q.dtype not in _GL_DTYPES:
        return False
    for t in (Q, K, V):
        if t.stride(-1) != 1 or t.data_ptr() % 16:
            return False
        for size, stride in zip(t.shape[:-1], t.stride()[:-1], strict=True):
            if size > 1 and (stride <= 0 or (stride * t.element_size()) % 16):
                return False
    return True


@functools.cache
def _shared_layout(rows: int, d: int, dtype: torch.dtype):
    return gl.NVMMASharedLayout.get_default_for([1, 1, rows, d], _GL_DTYPES[dtype])


def _descriptor(t: torch.Tensor, rows: int, full: bool = True):
    """A 4-D (B, H, N, d) descriptor: rows past N of a head read as zeros, never the next head's.

    A size-1 dimension's stride is never stepped along; it is given one TMA accepts. `full`: a
    `TensorDescriptor` (what compiling needs), else the launcher's `HostDescriptor`.
    """
    d = t.shape[-1]
    strides = [s if n > 1 else d * t.shape[-2] for n, s in zip(t.shape, t.stride(), strict=True)]
    strides[-1] = 1
    if not full:
        return HostDescriptor(t, list(t.shape), strides)
    return TensorDescriptor(t, list(t.shape), strides, [1, 1, rows, d], _shared_layout(rows, d, t.dtype))


def arguments(Q, K, V, O, LSE, qk_scale: float, cfg, causal: bool, store_lse: bool, full: bool = True):
    """(kernel, grid, arguments in the kernel's order, launch options) of one call: what
    `flash_attn_forward` launches, and what a compile for sm_90 without a GPU specializes on."""
    B, H, N, d = Q.shape
    rows = cfg.BLOCK_M // cfg.CONSUMERS
    args = dict(
        q_desc=_descriptor(Q, rows, full), k_desc=_descriptor(K, cfg.BLOCK_N, full),
        v_desc=_descriptor(V, cfg.BLOCK_N, full), o_desc=_descriptor(O, rows, full),
        lse_ptr=LSE, qk_scale=qk_scale, H=H, N=N, GROUP=H // K.shape[1],
        HEAD_DIM=d, BLOCK_M=rows, BLOCK_N=cfg.BLOCK_N, CONSUMERS=cfg.CONSUMERS, STAGES=cfg.num_stages,
        IS_CAUSAL=bool(causal), PINGPONG=cfg.PINGPONG, STORE_LSE=bool(store_lse),
        CONSUMER_REGS=CONSUMER_REGS[cfg.CONSUMERS],
    )
    return _flash_fwd_hopper, (triton.cdiv(N, cfg.BLOCK_M) * B * H, 1, 1), args, {"num_warps": 4}
