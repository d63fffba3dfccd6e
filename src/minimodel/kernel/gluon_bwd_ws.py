"""The backward's dK/dV kernel for Hopper (sm_90) in Gluon, warp-specialized as FlashAttention-3's
(`BwdConfig.dkdv` "gluon_ws"). One program per (128 keys, batch, K/V head), three partitions:
`_produce` (the default partition, few registers) brings K and V once, then Q and dO of every
query tile by TMA and their LSE and D by plain loads, into a ring of STAGES stages; `_mma` twice
(two warpgroups with most of the registers), warpgroup w owning keys [64w, 64w + 64): dK and dV
in registers for the whole loop. A step, in transposed form (keys as the rows of every MMA):
    Sᵀ = K Qᵀ,  dPᵀ = V dOᵀ,  Pᵀ = exp2(Sᵀ·scale·log2 e − LSE·log2 e),
    dV += Pᵀ dO,  dSᵀ = Pᵀ ∘ (dPᵀ − D),  dK += dSᵀ Q        (Pᵀ, dSᵀ from registers)
With DQ_IN_KERNEL (`dq` "in_kernel") the fifth GEMM, dQ = dS K: each warpgroup hands its dSᵀ rows
to the other through shared memory (double-buffered), computes half of the query tile's dQ over
all 128 keys, and the TMA engine adds it, times the scale, into a float32 dQ (`_dq_reduce`, as
FlashAttention-3 does; the adds' order makes dQ's last bits vary). Without it a dQ pass follows.

Rows and keys past N read as zeros (4-D descriptors bounded per head; LSE and D masked loads) and
get P = 0, so they add nothing. The aggregates are in `gluon_bwd_state`. Compiled on sm_90 only
(`launch.gluon_ok`), or for sm_90 on a CPU (tools/bwd_ws_report.py).
"""

# no `from __future__ import annotations`: an aggregate checks its fields against their annotations

import torch
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

from minimodel.kernel.gluon_bwd_state import (
    Config,
    Descriptors,
    Grads,
    KeyBlock,
    Ring,
    async_reduce_shared_to_global,
    dq_share,
)
from minimodel.kernel.hopper import _descriptor
from minimodel.kernel.launch import LOG2E, grid

_LOG2E = gl.constexpr(LOG2E)
MMA_REGS = gl.constexpr(240)  # registers per MMA thread: 2·128·240 + 128·24 (the producer's) <= 65,536


@gluon.jit
def _rows(d: Descriptors, ring: Ring, blk: KeyBlock, h, start_m, s, C: Config):
    """LSE and D of the step's query rows into stage s by plain loads (0 past N): a 1-D TMA copy's
    coordinate must be a multiple of 16 bytes, which a ragged N breaks (an illegal instruction)."""
    cols = start_m + gl.arange(0, C.BLOCK_M, layout=C.row_layout)
    base = (blk.b.to(gl.int64) * blk.H + h) * blk.N  # 64-bit: B·H·N may pass 2³¹
    inside = cols < blk.N
    ring.lse.index(s).store(gl.load(d.lse + base + cols, mask=inside, other=0.0))
    ring.delta.index(s).store(gl.load(d.delta + base + cols, mask=inside, other=0.0))


@gluon.jit
def _produce(d: Descriptors, ring: Ring, blk: KeyBlock, total, C: Config):
    """K and V once, then the step's Q, dO (TMA) and LSE, D (loads) into stage t % STAGES once both
    MMA warpgroups have released it (on the first pass the fresh barriers count as released)."""
    mbarrier.expect(ring.kv_ready, 2 * d.k.block_type.nbytes)
    tma.async_copy_global_to_shared(d.k, [blk.b, blk.h_kv, blk.start_n, 0], ring.kv_ready, ring.k)
    tma.async_copy_global_to_shared(d.v, [blk.b, blk.h_kv, blk.start_n, 0], ring.kv_ready, ring.v)
    for t in range(total):
        s = t % C.STAGES
        mbarrier.wait(ring.empty.index(s), ((t // C.STAGES) & 1) ^ 1)
        h, start_m = blk.query(t, C)
        bar = ring.ready.index(s)
        mbarrier.expect(bar, 2 * d.q.block_type.nbytes)  # the first of the step's two arrivals
        tma.async_copy_global_to_shared(d.q, [blk.b, h, start_m, 0], bar, ring.q.index(s))
        tma.async_copy_global_to_shared(d.do, [blk.b, h, start_m, 0], bar, ring.do.index(s))
        _rows(d, ring, blk, h, start_m, s, C)  # while Q and dO are in flight
        gl.thread_barrier()  # every producer thread has stored its rows before one arrives
        mbarrier.arrive(bar, count=1)


@gluon.jit
def _probabilities(st, lse, blk: KeyBlock, start_m, qk_scale, WG: gl.constexpr, C: Config):
    """Pᵀ of this warpgroup's keys; 0 where a query is past N, (causal) before the key, or the key
    is past N. Only the diagonal band and the ragged tiles build the mask."""
    pt = gl.exp2(st * qk_scale - gl.expand_dims(lse, 0))
    first_key = blk.start_n + WG * C.WG_KEYS
    if (start_m < blk.band_end) | (start_m + C.BLOCK_M > blk.N) | (first_key + C.WG_KEYS > blk.N):
        cols = gl.expand_dims(start_m + gl.arange(0, C.BLOCK_M, layout=C.col_layout), 0)
        keys = gl.expand_dims(first_key + gl.arange(0, C.WG_KEYS, layout=C.key_layout), 1)
        valid = (cols < blk.N) & (keys < blk.N)
        if C.IS_CAUSAL:
            valid = valid & (cols >= keys)
        pt = gl.where(valid, pt, 0.0)
    return pt


@gluon.jit
def _ds_ready(ring: Ring, t, ds16, WG: gl.constexpr, C: Config):
    """Hand this warpgroup's dSᵀ rows to the other one through ds[t % 2] (`ds_ready[t % 2]`)."""
    ring.ds.index(t % 2).slice(WG * C.WG_KEYS, C.WG_KEYS).store(ds16)
    fence_async_shared()  # this thread's generic-proxy stores, before any MMA reads them
    gl.thread_barrier()  # every thread of this warpgroup has stored before one thread arrives
    mbarrier.arrive(ring.ds_ready.index(t % 2), count=1)


@gluon.jit
def _dq_mma(ring: Ring, t, WG: gl.constexpr, C: Config):
    """Once both halves of dSᵀ are in ds[t % 2], issue this warpgroup's share of dQ = dS K,
    asynchronously."""
    buf = ring.ds.index(t % 2)
    mbarrier.wait(ring.ds_ready.index(t % 2), (t // 2) & 1)
    if C.DQ_ROWS:  # half the rows, every column
        a = buf.slice(WG * C.DQ_M, C.DQ_M, dim=1).permute((1, 0))
        b = ring.k
    else:  # every row, half the columns
        a = buf.permute((1, 0))
        b = ring.k.slice(WG * C.DQ_N, C.DQ_N, dim=1)
    zeros = gl.zeros([C.DQ_M, C.DQ_N], gl.float32, C.dq_layout)
    return warpgroup_mma(a, b, zeros, use_acc=False, is_async=True)


@gluon.jit
def _through_shared(ring: Ring, t, pt, dpt, q, do, dk, dv, WG: gl.constexpr, C: Config):
    """(dK, dV, this share of dQ) of a step with Pᵀ, then dSᵀ, the left operands of dV's and dK's
    GEMMs from this warpgroup's rows of ds[t % 2], not registers (SMEM_OPERANDS: at 128 query rows
    their register copies would spill). dSᵀ takes Pᵀ's place once dV's GEMM is done with it; the
    other warpgroup last read these rows for its dQ GEMM of step t − 2, done before step t − 1."""
    mine = ring.ds.index(t % 2).slice(WG * C.WG_KEYS, C.WG_KEYS)
    mine.store(pt.to(C.dtype))
    fence_async_shared()
    gl.thread_barrier()
    dv = warpgroup_mma(mine, do, dv, is_async=True)
    dpt, dv = warpgroup_mma_wait(0, deps=[dpt, dv])  # dV's GEMM is done with Pᵀ: dSᵀ takes its rows
    _ds_ready(ring, t, (pt * dpt).to(C.dtype), WG, C)
    dk = warpgroup_mma(mine, q, dk, is_async=True)
    dq = _dq_mma(ring, t, WG, C)
    dk, dq = warpgroup_mma_wait(0, deps=[dk, dq])
    return dk, dv, dq


@gluon.jit
def _store_rows(ptr, acc, blk: KeyBlock, WG: gl.constexpr, C: Config):
    """This warpgroup's rows of dK or dV (contiguous (B, H_kv, N, d)) by plain stores: the other
    warpgroup may still read K and V in shared memory. Rows past N are dropped."""
    first = blk.start_n + WG * C.WG_KEYS
    r = gl.expand_dims(gl.arange(0, C.WG_KEYS, layout=gl.SliceLayout(1, C.acc_layout)), 1)
    c = gl.expand_dims(gl.arange(0, C.HEAD_DIM, layout=gl.SliceLayout(0, C.acc_layout)), 0)
    base = ptr + ((blk.b.to(gl.int64) * (blk.H // blk.GROUP) + blk.h_kv) * blk.N + first) * C.HEAD_DIM
    inside = (first + r < blk.N) & (c < C.HEAD_DIM)  # the column test only makes the mask 2-D
    gl.store(base + r * C.HEAD_DIM + c, acc.to(C.dtype), mask=inside)


@gluon.jit
def _dq_origin(start_m, WG: gl.constexpr, C: Config):
    """(first row, first column) of this warpgroup's share of the query tile's dQ."""
    if C.DQ_ROWS:
        return start_m + WG * C.DQ_M, 0
    else:
        return start_m, WG * C.DQ_N


@gluon.jit
def _dq_reduce(dq, dq_desc, ring: Ring, g: Grads, blk: KeyBlock, h, start_m, WG: gl.constexpr, C: Config):
    """Store scale · this share of dQ (query head h, rows from start_m) to the warpgroup's shared
    tile, and have the TMA engine add it into the float32 dQ behind dq_desc (rows past N clipped by
    the descriptor)."""
    row0, col0 = _dq_origin(start_m, WG, C)
    tile = ring.dq.index(WG)
    tma.store_wait(0)  # in the thread that issued the last step's reduction: the engine has read the tile
    gl.thread_barrier()  # ... before any thread of the warpgroup writes it again
    tile.store(dq * g.sm_scale)
    fence_async_shared()  # the generic-proxy stores, before the TMA engine reads them
    gl.thread_barrier()
    async_reduce_shared_to_global(dq_desc, [blk.b, h, row0, col0], tile)


@gluon.jit
def _mma(ring: Ring, blk: KeyBlock, total, g: Grads, dq_desc, WG: gl.constexpr, C: Config):
    """MMA warpgroup WG: dK, dV of keys [64·WG, 64·WG + 64) of the block, over every step; the
    stage is released once this warpgroup's GEMMs that read it are done."""
    k = ring.k.slice(WG * C.WG_KEYS, C.WG_KEYS)
    v = ring.v.slice(WG * C.WG_KEYS, C.WG_KEYS)
    dk = gl.zeros([C.WG_KEYS, C.HEAD_DIM], gl.float32, C.acc_layout)
    dv = gl.zeros([C.WG_KEYS, C.HEAD_DIM], gl.float32, C.acc_layout)
    mbarrier.wait(ring.kv_ready, 0)
    for t in range(total):
        s = t % C.STAGES
        mbarrier.wait(ring.ready.index(s), (t // C.STAGES) & 1)
        q = ring.q.index(s)
        do = ring.do.index(s)
        zeros = gl.zeros([C.WG_KEYS, C.BLOCK_M], gl.float32, C.st_layout)
        st = warpgroup_mma(k, q.permute((1, 0)), zeros, use_acc=False, is_async=True)
        # dPᵀ accumulates onto −D, giving dPᵀ − D: D (and LSE), a value per column, BLOCK_M / 4
        # registers a thread, the loop has no room to keep, so they are read where used
        delta = ring.delta.index(s).load(C.col_layout)
        dpt = warpgroup_mma(v, do.permute((1, 0)), zeros - gl.expand_dims(delta, 0), is_async=True)
        h, start_m = blk.query(t, C)
        st = warpgroup_mma_wait(1, deps=[st])  # Sᵀ done; dPᵀ runs on under the exponentials
        lse = ring.lse.index(s).load(C.col_layout) * _LOG2E
        pt = _probabilities(st, lse, blk, start_m, g.qk_scale, WG, C)
        if C.SMEM_OPERANDS:
            dk, dv, dq = _through_shared(ring, t, pt, dpt, q, do, dk, dv, WG, C)
            mbarrier.arrive(ring.empty.index(s), count=1)
            _dq_reduce(dq, dq_desc, ring, g, blk, h, start_m, WG, C)
        else:
            p16 = gl.convert_layout(pt.to(C.dtype), C.op_layout)
            dv = warpgroup_mma(p16, do, dv, is_async=True)
            dpt, dv, p16 = warpgroup_mma_wait(0, deps=[dpt, dv, p16])  # frees Pᵀ's registers for dSᵀ
            dst = (pt * dpt).to(C.dtype)
            ds16 = gl.convert_layout(dst, C.op_layout)
            dk = warpgroup_mma(ds16, q, dk, is_async=True)
            if C.DQ_IN_KERNEL:
                _ds_ready(ring, t, dst, WG, C)
                dq = _dq_mma(ring, t, WG, C)
                dk, dq, ds16 = warpgroup_mma_wait(0, deps=[dk, dq, ds16])
                mbarrier.arrive(ring.empty.index(s), count=1)
                _dq_reduce(dq, dq_desc, ring, g, blk, h, start_m, WG, C)
            else:
                dk, ds16 = warpgroup_mma_wait(0, deps=[dk, ds16])
                mbarrier.arrive(ring.empty.index(s), count=1)
    _store_rows(g.dk, dk * g.sm_scale, blk, WG, C)
    _store_rows(g.dv, dv, blk, WG, C)
    if C.DQ_IN_KERNEL:
        tma.store_wait(0)  # the last step's reduction has read its tile


@gluon.jit(do_not_specialize=["H", "N", "GROUP"])
def _bwd_dkdv_ws(q_desc, do_desc, k_desc, v_desc, lse, delta, dk_ptr, dv_ptr, dq_desc, qk_scale, sm_scale,
                 H, N, GROUP, BLOCK_M: gl.constexpr, STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr,
                 DQ_IN_KERNEL: gl.constexpr):
    """dK, dV (with DQ_IN_KERNEL, dQ's share into dq_desc, else None) of 128 keys of one (batch,
    K/V head), summed over its GROUP query heads. lse, delta: float32 pointers."""
    C = Config(BLOCK_M, k_desc.block_type.shape[2], k_desc.block_type.shape[3], STAGES, IS_CAUSAL,
               DQ_IN_KERNEL, k_desc.dtype)
    blk = KeyBlock.create(H, N, GROUP, C)
    total = blk.tiles * GROUP
    ring = Ring.create(C)
    descs = Descriptors(q_desc, do_desc, k_desc, v_desc, lse, delta)
    g = Grads(dk_ptr, dv_ptr, qk_scale, sm_scale)
    gl.warp_specialize([
        (_produce, (descs, ring, blk, total, C)),
        (_mma, (ring, blk, total, g, dq_desc, 0, C)),
        (_mma, (ring, blk, total, g, dq_desc, 1, C)),
    ], [4, 4], [MMA_REGS, MMA_REGS])


def dq_descriptor(dq: torch.Tensor, block_m: int) -> TensorDescriptor:
    """A 4-D descriptor over the contiguous float32 (B, H, N, d) dQ, a box one warpgroup's share
    (DQ_IN_KERNEL): rows past N of a head are clipped, never added into the next head's."""
    rows, cols = dq_share(block_m, dq.shape[-1])
    head = dq.shape[-1] * dq.shape[-2]
    strides = [s if n > 1 else head for n, s in zip(dq.shape, dq.stride(), strict=True)]
    layout = gl.NVMMASharedLayout.get_default_for([1, 1, rows, cols], gl.float32)
    return TensorDescriptor(dq, list(dq.shape), strides, [1, 1, rows, cols], layout)


def dkdv_launch(q, k, v, do, dq, dk, dv, lse, delta, scale: float, cfg, causal: bool):
    """(kernel, grid, arguments, launch options) of the dK/dV launch for `cfg` (dkdv "gluon_ws"; dq
    "in_kernel": dq is the zeroed float32 accumulator, else unused). q, k, v, do readable by TMA
    (`launch.gluon_ok`); lse, delta, dq, dk, dv contiguous."""
    B, H, N, _ = q.shape
    H_kv = k.shape[1]
    rows = cfg.BLOCK_M1
    in_kernel = cfg.dq == "in_kernel"
    args = dict(q_desc=_descriptor(q, rows), do_desc=_descriptor(do, rows),
                k_desc=_descriptor(k, cfg.BLOCK_N1), v_desc=_descriptor(v, cfg.BLOCK_N1), lse=lse,
                delta=delta, dk_ptr=dk, dv_ptr=dv, dq_desc=dq_descriptor(dq, rows) if in_kernel else None,
                qk_scale=scale * LOG2E, sm_scale=scale, H=H, N=N, GROUP=H // H_kv, BLOCK_M=cfg.BLOCK_M1,
                STAGES=cfg.num_stages_kv, IS_CAUSAL=bool(causal), DQ_IN_KERNEL=in_kernel)
    return _bwd_dkdv_ws, grid(N, B * H_kv, cfg.BLOCK_N1), args, {"num_warps": 4}
