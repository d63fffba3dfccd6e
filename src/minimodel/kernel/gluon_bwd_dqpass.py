"""The backward's dQ pass for Hopper (sm_90) in Gluon (`BwdConfig.dq` "gluon_pass"), warp-specialized
as the forward (`hopper`): what the tl `backward._bwd_dq_kernel` computes, deterministic like it.

One program per (query tile of CONSUMERS·BLOCK_M rows, batch, query head): `_load` (the default
partition, few registers) brings Q and dO once, then K and V of every key tile through TMA into a
ring of STAGES stages (`hopper_state.Channels`, dO's buffers beside Q's); `_consume` CONSUMERS
times (2, or 3 at 160 registers each), consumer w owning query rows [w·BLOCK_M, (w + 1)·BLOCK_M),
dQ in registers for the whole loop. Step j, key tile j:
    S = Q Kⱼᵀ,  dP = dO Vⱼᵀ,  P = exp2(S·scale·log2 e − LSE·log2 e),  dS = P ∘ (dP − D),
    dQ += dS Kⱼ        (dS from registers, as the forward's P).
Step j's GEMMs are issued before dQ's GEMM of step j − 1, which runs under step j's exponentials,
so Kⱼ's stage is released a step after Vⱼ's. dQ · scale leaves through TMA from the Q buffer.
Rows and keys past N read as zeros and get P = 0; causal masks only the tiles from `full` on.
Compiled on sm_90 only, or for sm_90 on a CPU.
"""

# no `from __future__ import annotations`: an aggregate checks its fields against their annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from minimodel.kernel.config import DQ_KEYS, DQ_ROWS
from minimodel.kernel.hopper import CONSUMER_REGS, _descriptor, _kv_tiles, _phase, _stage, query_program
from minimodel.kernel.hopper_state import Channels, QueryTile, Tiles
from minimodel.kernel.launch import LOG2E, grid
from minimodel.kernel.policy import GLUON_BWD_HEAD_DIMS

_LOG2E = gl.constexpr(LOG2E)
CONSUMERS = 2  # MMA warpgroups of DQ_ROWS query rows (one MMA's M), DQ_KEYS keys per step (notes/backward.md)


@gluon.jit
def _load(q_desc, do_desc, k_desc, v_desc, h_kv, ch: Channels, do_buf, tile: QueryTile, T: Tiles):
    """Producer: Q and dO of each consumer's rows once (both on q_ready), then K and V of each key
    tile into stage j % STAGES once both consumers released it (K a step after V)."""
    mbarrier.expect(ch.q_ready, 2 * T.CONSUMERS * q_desc.block_type.nbytes)
    for c in gl.static_range(T.CONSUMERS):
        row0 = tile.pid_m * T.BLOCK_Q + c * T.BLOCK_M
        tma.async_copy_global_to_shared(q_desc, [tile.b, tile.h, row0, 0], ch.q_ready, ch.q.index(c))
        tma.async_copy_global_to_shared(do_desc, [tile.b, tile.h, row0, 0], ch.q_ready, do_buf.index(c))
    _, total = _kv_tiles(tile.pid_m, tile.N, T.BLOCK_Q, T.BLOCK_N, T.IS_CAUSAL)
    for j in range(total):
        s = _stage(j, T.STAGES)
        free = _phase(j, T.STAGES) ^ 1  # on the first pass the fresh barriers count as released
        mbarrier.wait(ch.v_empty.index(s), free)
        mbarrier.expect(ch.v_ready.index(s), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [tile.b, h_kv, j * T.BLOCK_N, 0], ch.v_ready.index(s),
                                        ch.v.index(s))
        mbarrier.wait(ch.k_empty.index(s), free)
        mbarrier.expect(ch.k_ready.index(s), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [tile.b, h_kv, j * T.BLOCK_N, 0], ch.k_ready.index(s),
                                        ch.k.index(s))


@gluon.jit
def _probabilities(s, lse, j, full, rows, N, T: Tiles):
    """P of key tile j from S·qk_scale and LSE·log2 e: 0 where a key is past N or (causal) after
    the query; only tiles from `full` on build the mask."""
    p = gl.exp2(s - gl.expand_dims(lse, 1))
    if j >= full:
        keys = j * T.BLOCK_N + gl.arange(0, T.BLOCK_N, layout=gl.SliceLayout(0, T.s_layout))
        cols = gl.expand_dims(keys, 0)
        valid = cols < N
        if T.IS_CAUSAL:
            valid = valid & (gl.expand_dims(rows, 1) >= cols)
        p = gl.where(valid, p, 0.0)
    return p


@gluon.jit
def _scores(ch: Channels, q, do, j, WG: gl.constexpr, T: Tiles):
    """Issue S = Q Kⱼᵀ and dP = dO Vⱼᵀ (asynchronous) once Kⱼ and Vⱼ have landed."""
    st = _stage(j, T.STAGES)
    zeros = gl.zeros([T.BLOCK_M, T.BLOCK_N], gl.float32, T.s_layout)
    mbarrier.wait(ch.k_ready.index(st), _phase(j, T.STAGES))
    mbarrier.wait(ch.v_ready.index(st), _phase(j, T.STAGES))
    s = warpgroup_mma(q, ch.k.index(st).permute((1, 0)), zeros, use_acc=False, is_async=True)
    dp = warpgroup_mma(do, ch.v.index(st).permute((1, 0)), zeros, use_acc=False, is_async=True)
    return s, dp


@gluon.jit
def _consume(ch: Channels, do_buf, tile: QueryTile, delta_ptr, sm_scale, WG: gl.constexpr, T: Tiles):
    """Consumer WG: dQ of rows [WG·BLOCK_M, (WG + 1)·BLOCK_M) of the query tile (`tile`: its output
    dQ's descriptor, the forward's LSE); delta_ptr: D = rowsum(dO ∘ O), float32 (B, H, N)."""
    full, total = _kv_tiles(tile.pid_m, tile.N, T.BLOCK_Q, T.BLOCK_N, T.IS_CAUSAL)
    row0 = tile.pid_m * T.BLOCK_Q + WG * T.BLOCK_M
    rows = row0 + gl.arange(0, T.BLOCK_M, layout=gl.SliceLayout(1, T.s_layout))
    base = tile.pid_bh.to(gl.int64) * tile.N  # 64-bit: B·H·N may pass 2³¹
    inside = rows < tile.N
    # LSE in base 2, with S's scale folded into the exponent's argument: S·qk_scale − LSE·log2 e
    lse = gl.load(tile.lse_ptr + base + rows, mask=inside, other=0.0) * _LOG2E
    delta = gl.expand_dims(gl.load(delta_ptr + base + rows, mask=inside, other=0.0), 1)
    q = ch.q.index(WG)
    do = do_buf.index(WG)
    mbarrier.wait(ch.q_ready, 0)

    # step 0: dS of the first key tile, whose dQ GEMM step 1 issues
    s, dp = _scores(ch, q, do, 0, WG, T)
    s = warpgroup_mma_wait(1, deps=[s])
    p = _probabilities(s * tile.qk_scale, lse, 0, full, rows, tile.N, T)
    dp = warpgroup_mma_wait(0, deps=[dp])
    mbarrier.arrive(ch.v_empty.index(0), count=1)
    ds16 = gl.convert_layout((p * (dp - delta)).to(T.dtype), T.p_layout)
    dq = gl.zeros([T.BLOCK_M, T.HEAD_DIM], gl.float32, T.o_layout)

    for j in range(1, total):
        prev = _stage(j - 1, T.STAGES)
        s, dp = _scores(ch, q, do, j, WG, T)
        dq = warpgroup_mma(ds16, ch.k.index(prev), dq, is_async=True)  # runs under the exponentials
        s = warpgroup_mma_wait(2, deps=[s])
        p = _probabilities(s * tile.qk_scale, lse, j, full, rows, tile.N, T)
        dp = warpgroup_mma_wait(1, deps=[dp])
        mbarrier.arrive(ch.v_empty.index(_stage(j, T.STAGES)), count=1)
        ds = (p * (dp - delta)).to(T.dtype)
        dq, ds16 = warpgroup_mma_wait(0, deps=[dq, ds16])
        mbarrier.arrive(ch.k_empty.index(prev), count=1)
        ds16 = gl.convert_layout(ds, T.p_layout)

    last = _stage(total - 1, T.STAGES)
    dq = warpgroup_mma(ds16, ch.k.index(last), dq, is_async=True)
    dq, ds16 = warpgroup_mma_wait(0, deps=[dq, ds16])
    mbarrier.arrive(ch.k_empty.index(last), count=1)

    # dQ leaves through TMA from this consumer's Q buffer, free since its last S GEMM completed;
    # the 4-D descriptor drops rows past N
    q.store((dq * sm_scale).to(T.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(tile.o_desc, [tile.b, tile.h, row0, 0], q)
    tma.store_wait(0)


@gluon.jit(do_not_specialize=["H", "N", "GROUP"])
def _bwd_dq_hopper(q_desc, k_desc, v_desc, do_desc, dq_desc, lse, delta, qk_scale, sm_scale, H, N, GROUP,
                   HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                   CONSUMERS: gl.constexpr, STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr,
                   CONSUMER_REGS: gl.constexpr):
    """One program per (query tile of CONSUMERS·BLOCK_M rows, batch·head): `_load`, `_consume`s."""
    T = Tiles(BLOCK_M, BLOCK_N, HEAD_DIM, CONSUMERS, STAGES, IS_CAUSAL, False, False, q_desc.dtype)
    pid_m, pid_bh, b, h = query_program(N, H, T)
    tile = QueryTile(dq_desc, lse, b, h, pid_m, pid_bh, N, qk_scale)  # the forward's, dQ its output
    ch = Channels.create(T)
    do_buf = gl.allocate_shared_memory(T.dtype, [T.CONSUMERS, T.BLOCK_M, T.HEAD_DIM], T.q_smem)
    gl.static_assert((CONSUMERS == 2) | (CONSUMERS == 3), "the pass has two or three consumer warpgroups")
    # every consumer's entry is written out (a partition's WG must be a constexpr), cut to CONSUMERS
    gl.warp_specialize([
        (_load, (q_desc, do_desc, k_desc, v_desc, h // GROUP, ch, do_buf, tile, T)),
        (_consume, (ch, do_buf, tile, delta, sm_scale, 0, T)),
        (_consume, (ch, do_buf, tile, delta, sm_scale, 1, T)),
        (_consume, (ch, do_buf, tile, delta, sm_scale, 2, T)),
    ][:CONSUMERS + 1], [4] * CONSUMERS, [CONSUMER_REGS] * CONSUMERS)


def dq_launch(q, k, v, do, dq, lse, delta, scale: float, causal: bool, block_n: int = DQ_KEYS,
              stages: int = 4, consumers: int = CONSUMERS):
    """(kernel, grid, arguments, launch options) of the dQ pass: dq (q's shape and dtype, contiguous)
    gets scale · dS K. q, k, v, do readable by TMA (`launch.gluon_readable`); lse, delta float32
    (B, H, N), contiguous. block_n: keys per step, stages: K/V buffers, consumers: 2 or 3."""
    B, H, N, d = q.shape
    if d not in GLUON_BWD_HEAD_DIMS:
        raise ValueError(f"the Gluon dQ pass is built for head dims {GLUON_BWD_HEAD_DIMS}, got {d}")
    if consumers not in CONSUMER_REGS:
        raise ValueError(f"the Gluon dQ pass has {sorted(CONSUMER_REGS)} consumer warpgroups, "
                         f"got {consumers}")
    args = dict(q_desc=_descriptor(q, DQ_ROWS), k_desc=_descriptor(k, block_n),
                v_desc=_descriptor(v, block_n), do_desc=_descriptor(do, DQ_ROWS),
                dq_desc=_descriptor(dq, DQ_ROWS), lse=lse, delta=delta,
                qk_scale=scale * LOG2E, sm_scale=scale, H=H, N=N, GROUP=H // k.shape[1], HEAD_DIM=d,
                BLOCK_M=DQ_ROWS, BLOCK_N=block_n, CONSUMERS=consumers, STAGES=stages,
                IS_CAUSAL=bool(causal), CONSUMER_REGS=CONSUMER_REGS[consumers])
    return _bwd_dq_hopper, grid(N, B * H, consumers * DQ_ROWS), args, {"num_warps": 4}


def config_launch(q, k, v, do, dq, lse, delta, scale: float, cfg, causal: bool):
    """`dq_launch` with the tiles of `cfg` (dq "gluon_pass": `dq_consumers`, BLOCK_N2, num_stages_q)."""
    return dq_launch(q, k, v, do, dq, lse, delta, scale, causal, block_n=cfg.BLOCK_N2,
                     stages=cfg.num_stages_q, consumers=cfg.dq_consumers)
