"""Flash-attention forward for Hopper (sm_90) in Gluon, scheduled like FlashAttention-3.

One program per (query tile, batch·head), warp-specialized: `_load`, the producer (the default
partition; its registers go to the consumers), brings Q once and every K and V tile through TMA
into a ring of shared-memory stages; `_consume`, CONSUMERS warpgroups of BLOCK_M query rows, read
each key tile from the same stage. Two overlaps hide the softmax behind the tensor cores: inside a
consumer, QKᵀ of tile j + 1 is issued before the softmax of tile j finishes; between consumers, a
pair of mbarriers hands the tensor cores from one warpgroup to the other (PINGPONG). The forward
runs two consumers of 64 rows taking turns (`policy.gluon_config`, d = 128); its partitions and
their state (`hopper_state`) serve the Gluon dQ pass too (`gluon_bwd_dqpass`, no turns).

The softmax is the tl kernel's (`flash._softmax_step`) step for step: base 2, the raw maximum
subtracted before scaling (any finite sm_scale gives the float64 answer, never NaN). It is written
out again because here the softmax of tile j runs between the asynchronous QKᵀ of tile j and PV
of tile j − 1. Gluon has no interpreter: this runs compiled on sm_90 (`launch.launch_config`), or
compiles for sm_90 on a CPU; defining it needs neither.
"""

# no `from __future__ import annotations`: an aggregate checks its fields against their annotations

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

from minimodel.kernel.config import GLUON_FWD_CONSUMERS
from minimodel.kernel.hopper_state import Channels, Inputs, QueryTile, Tiles
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
def _load(src: Inputs, ch: Channels, tile: QueryTile, T: Tiles):
    """Producer: each consumer's Q rows once, then K and V of each key tile into stage j % STAGES
    once it is free; K and V have their own barriers, so QKᵀ may start while V is in flight. Rows
    past N arrive as zeros (4-D descriptors, bounded per head)."""
    mbarrier.expect(ch.q_ready, T.CONSUMERS * src.q.block_type.nbytes)
    for c in gl.static_range(T.CONSUMERS):
        row0 = tile.pid_m * T.BLOCK_Q + c * T.BLOCK_M
        tma.async_copy_global_to_shared(src.q, [tile.b, tile.h, row0, 0], ch.q_ready, ch.q.index(c))
    _, total = _kv_tiles(tile.pid_m, tile.N, T.BLOCK_Q, T.BLOCK_N, T.IS_CAUSAL)
    for j in range(total):
        s = _stage(j, T.STAGES)
        # the consumers released this stage's previous tile in the phase before; on the first
        # pass the fresh barriers count as free
        free = _phase(j, T.STAGES) ^ 1
        mbarrier.wait(ch.k_empty.index(s), free)
        mbarrier.expect(ch.k_ready.index(s), src.k.block_type.nbytes)
        tma.async_copy_global_to_shared(src.k, [tile.b, src.h_kv, j * T.BLOCK_N, 0], ch.k_ready.index(s),
                                        ch.k.index(s))
        mbarrier.wait(ch.v_empty.index(s), free)
        mbarrier.expect(ch.v_ready.index(s), src.v.block_type.nbytes)
        tma.async_copy_global_to_shared(src.v, [tile.b, src.h_kv, j * T.BLOCK_N, 0], ch.v_ready.index(s),
                                        ch.v.index(s))


@gluon.jit
def query_program(N, H, T: Tiles):
    """(query tile, batch·head, batch, head) of this program: one per (tile of BLOCK_Q rows,
    batch·head), all on the grid's x axis, the tile fastest; causal, the last query tiles, with
    the most keys to visit, first."""
    num_m = gl.cdiv(N, T.BLOCK_Q)
    pid = gl.program_id(0)
    pid_m = pid % num_m
    if T.IS_CAUSAL:
        pid_m = num_m - 1 - pid_m
    pid_bh = pid // num_m
    return pid_m, pid_bh, pid_bh // H, pid_bh % H


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
    """Block until the previous consumer has issued its GEMMs of step t: turns[i] completes a phase
    each time consumer i − 1 (cyclically) hands over; consumer 0 waits for phase t − 1 (t = 0
    passes on the fresh barrier), the others for phase t."""
    if PINGPONG:
        mbarrier.wait(turns.index(WG), (t & 1) ^ (WG == 0))


@gluon.jit
def _pass_turn(turns, WG: gl.constexpr, CONSUMERS: gl.constexpr, PINGPONG: gl.constexpr):
    if PINGPONG:
        mbarrier.arrive(turns.index((WG + 1) % CONSUMERS), count=1)


@gluon.jit
def _consume(ch: Channels, tile: QueryTile, WG: gl.constexpr, T: Tiles):
    """Consumer warpgroup WG: rows [WG·BLOCK_M, (WG+1)·BLOCK_M) of the query tile. Step j issues
    QKᵀ of tile j and PV of tile j − 1 back to back, then the softmax of tile j runs under PV."""
    full, total = _kv_tiles(tile.pid_m, tile.N, T.BLOCK_Q, T.BLOCK_N, T.IS_CAUSAL)
    rows = (tile.pid_m * T.BLOCK_Q + WG * T.BLOCK_M
            + gl.arange(0, T.BLOCK_M, layout=gl.SliceLayout(1, T.s_layout)))
    q = ch.q.index(WG)
    mbarrier.wait(ch.q_ready, 0)

    # step 0: QKᵀ of the first key tile alone (every row sees key 0: its maximum is finite)
    mbarrier.wait(ch.k_ready.index(0), 0)
    _wait_turn(ch.turns, 0, WG, T.PINGPONG)
    zeros = gl.zeros([T.BLOCK_M, T.BLOCK_N], gl.float32, T.s_layout)
    s = warpgroup_mma(q, ch.k.index(0).permute((1, 0)), zeros, use_acc=False, is_async=True)
    _pass_turn(ch.turns, WG, T.CONSUMERS, T.PINGPONG)
    s = warpgroup_mma_wait(0, deps=[s])
    mbarrier.arrive(ch.k_empty.index(0), count=1)
    s = _mask(s, 0, full, rows, tile.N, T.BLOCK_N, T.IS_CAUSAL)
    m_i = gl.max(s, 1)
    p = gl.exp2((s - gl.expand_dims(m_i, 1)) * tile.qk_scale)
    l_i = gl.sum(p, 1)
    alpha = gl.full([T.BLOCK_M], 1.0, gl.float32, gl.SliceLayout(1, T.s_layout))
    acc = gl.zeros([T.BLOCK_M, T.HEAD_DIM], gl.float32, T.o_layout)

    for j in range(1, total):
        st = _stage(j, T.STAGES)
        prev = _stage(j - 1, T.STAGES)
        p16 = gl.convert_layout(p.to(T.dtype), T.p_layout)
        mbarrier.wait(ch.k_ready.index(st), _phase(j, T.STAGES))
        _wait_turn(ch.turns, j, WG, T.PINGPONG)
        zeros = gl.zeros([T.BLOCK_M, T.BLOCK_N], gl.float32, T.s_layout)
        s = warpgroup_mma(q, ch.k.index(st).permute((1, 0)), zeros, use_acc=False, is_async=True)
        # while QKᵀ runs: bring O to the maximum that P of tile j − 1 was taken under
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, T.o_layout)), 1)
        mbarrier.wait(ch.v_ready.index(prev), _phase(j - 1, T.STAGES))
        acc = warpgroup_mma(p16, ch.v.index(prev), acc, is_async=True)
        _pass_turn(ch.turns, WG, T.CONSUMERS, T.PINGPONG)
        s = warpgroup_mma_wait(1, deps=[s])  # QKᵀ done; PV may still run
        mbarrier.arrive(ch.k_empty.index(st), count=1)
        s = _mask(s, j, full, rows, tile.N, T.BLOCK_N, T.IS_CAUSAL)
        m_new = gl.maximum(m_i, gl.max(s, 1))
        alpha = gl.exp2((m_i - m_new) * tile.qk_scale)  # rescales what was summed under the old maximum
        p = gl.exp2((s - gl.expand_dims(m_new, 1)) * tile.qk_scale)
        l_i = l_i * alpha + gl.sum(p, 1)
        m_i = m_new
        acc, p16 = warpgroup_mma_wait(0, deps=[acc, p16])
        mbarrier.arrive(ch.v_empty.index(prev), count=1)

    last = _stage(total - 1, T.STAGES)
    p16 = gl.convert_layout(p.to(T.dtype), T.p_layout)
    acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, T.o_layout)), 1)
    mbarrier.wait(ch.v_ready.index(last), _phase(total - 1, T.STAGES))
    acc = warpgroup_mma(p16, ch.v.index(last), acc, is_async=True)
    acc, p16 = warpgroup_mma_wait(0, deps=[acc, p16])
    mbarrier.arrive(ch.v_empty.index(last), count=1)

    acc = acc / gl.expand_dims(gl.convert_layout(l_i, gl.SliceLayout(1, T.o_layout)), 1)
    # O leaves through TMA from this consumer's Q buffer, free since its last QKᵀ completed;
    # the 4-D descriptor drops rows past N
    q.store(acc.to(T.dtype))
    fence_async_shared()
    row0 = tile.pid_m * T.BLOCK_Q + WG * T.BLOCK_M
    tma.async_copy_shared_to_global(tile.o_desc, [tile.b, tile.h, row0, 0], q)
    tma.store_wait(0)
    if T.STORE_LSE:
        # natural-log log-sum-exp per row, what a backward pass needs (m_i is the raw maximum)
        lse = (m_i * tile.qk_scale + gl.log2(l_i)) * LN2
        gl.store(tile.lse_ptr + tile.pid_bh.to(gl.int64) * tile.N + rows, lse, mask=rows < tile.N)


_GL_DTYPES = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}
# registers per consumer thread by consumer warpgroups, the producer's given away: 2·128·240 + 128·24
# and 3·128·160 + 128·32 fit the multiprocessor's 65,536
CONSUMER_REGS = {2: 240, 3: 160}
_TWO_CONSUMERS_REGS = gl.constexpr(CONSUMER_REGS[GLUON_FWD_CONSUMERS])


@gluon.jit(do_not_specialize=["H", "N", "GROUP"])
def _flash_fwd_hopper(q_desc, k_desc, v_desc, o_desc, lse_ptr, qk_scale, H, N, GROUP,
                      HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                      STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr, STORE_LSE: gl.constexpr):
    """One program per (query tile of 2·BLOCK_M rows, batch·head): the producer and two consumers
    taking turns. H, N, GROUP not specialized: one compiled kernel serves every such call."""
    T = Tiles(BLOCK_M, BLOCK_N, HEAD_DIM, 2, STAGES, IS_CAUSAL, True, STORE_LSE, q_desc.dtype)
    pid_m, pid_bh, b, h = query_program(N, H, T)
    src = Inputs(q_desc, k_desc, v_desc, h // GROUP)  # grouped-query attention: GROUP heads share K, V
    tile = QueryTile(o_desc, lse_ptr, b, h, pid_m, pid_bh, N, qk_scale)
    ch = Channels.create(T)
    gl.warp_specialize([
        (_load, (src, ch, tile, T)),
        (_consume, (ch, tile, 0, T)),
        (_consume, (ch, tile, 1, T)),
    ], [4, 4], [_TWO_CONSUMERS_REGS, _TWO_CONSUMERS_REGS])


@functools.cache
def _shared_layout(rows: int, d: int, dtype: torch.dtype):
    return gl.NVMMASharedLayout.get_default_for([1, 1, rows, d], _GL_DTYPES[dtype])


def _descriptor(t: torch.Tensor, rows: int, full: bool = True):
    """A 4-D (B, H, N, d) descriptor: rows past N of a head read as zeros, never the next head's;
    a size-1 dimension gets a stride TMA accepts. `full`: a `TensorDescriptor`, else a `HostDescriptor`."""
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
    rows = cfg.BLOCK_M // GLUON_FWD_CONSUMERS
    args = dict(
        q_desc=_descriptor(Q, rows, full), k_desc=_descriptor(K, cfg.BLOCK_N, full),
        v_desc=_descriptor(V, cfg.BLOCK_N, full), o_desc=_descriptor(O, rows, full),
        lse_ptr=LSE, qk_scale=qk_scale, H=H, N=N, GROUP=H // K.shape[1],
        HEAD_DIM=d, BLOCK_M=rows, BLOCK_N=cfg.BLOCK_N, STAGES=cfg.num_stages, IS_CAUSAL=bool(causal),
        STORE_LSE=bool(store_lse),
    )
    return _flash_fwd_hopper, (triton.cdiv(N, cfg.BLOCK_M) * B * H, 1, 1), args, {"num_warps": 4}
