"""Deterministic dQ by TMA reductions in the warp-specialized backward (`gluon_bwd_ws`, with
`BwdConfig.ORDERED_DQ`): the additions of the key blocks into one query tile's dQ come in a fixed
order, as in FlashAttention-3's deterministic mode, so dQ has the same bits on every call.

Each (batch, query head, query tile, MMA warpgroup's share) has an int32 counter, zeroed before
the launch, of the key blocks that have added into it. Key block j adds its share only when the
counter reads its rank (`wait_turn`); a step later, in the MMA warpgroup that issued it, it waits
until that addition is complete in global memory and counts itself (`pass_turn`), so that the
warpgroup does not wait for its own reduction's round trip (`gluon_bwd_dq`).

The order (`turn`): rank(j, m) = (m // R − j) mod NB for query tile m, NB key blocks and
R = BLOCK_N / BLOCK_M query tiles per key block. Without the causal mask every key block walks
the query tiles from its own start, R·j (`step_query`), so that at step s its rank is s // R: each
block waits on one that reached the tile a step or two before, a wavefront, where a common start
would chain the blocks one reduction latency apart. With the mask the walk is the plain one (key
block j from tile R·j on), and the diagonal block adds first. dK and dV are summed in the walk's
order: different from the plain kernel's, the same on every call.

A block spins while it holds its SM, on another block of its (batch, K/V head): the waits resolve
when every key block of one head fits on the GPU at once (blocks launch in order), so the
configuration is used only where cdiv(N, BLOCK_N) is at most the GPU's SM count
(`bwd_config.ordered_dq_fits`). With the mask, block j adds after block j + 1 at every tile, so
the key blocks are numbered last first (`KeyBlock.create(LAST_FIRST)`): each waits only on a block
that started before it, where the first-first numbering had a head's long early blocks spin for
later ones that start only as SMs free up (under ncu its long-scoreboard stalls grew with N,
notes/backward.md). The derivation, and FlashAttention-3's code it was checked against, are in
notes/backward.md.
"""

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from minimodel.kernel.gluon_backward import KeyBlock
from minimodel.kernel.gluon_bwd_ring import Config

# every thread of the warpgroup polls the counter (acquire, GPU scope) until it reads the rank;
# then its later TMA reduction (the async proxy) is ordered after what it read
_SPIN = gl.constexpr("""{
.reg .pred %turn_p;
TURN_${:uid}:
ld.global.acquire.gpu.b32 $0, [$1];
setp.ne.s32 %turn_p, $0, $2;
@%turn_p bra TURN_${:uid};
fence.proxy.async.global;
}""")
# the issuing thread's bulk reductions complete in global memory (`tma.store_wait` waits only for
# their reads of shared memory), and are ordered before the counter's release
_COMPLETE = gl.constexpr("cp.async.bulk.wait_group 0;\nfence.proxy.async.global;\nmov.u32 $0, 0;")
_WARPGROUP = gl.constexpr(gl.BlockedLayout([1], [32], [4], [0]))


@gluon.jit
def step_query(blk: KeyBlock, t, C: Config):
    """(query head, first query row) of step t: ordered and not causal, key block j walks each
    head's query tiles from tile R·j on, wrapping; otherwise `KeyBlock.query`'s walk."""
    if C.DQ_ORDERED and not C.IS_CAUSAL:
        g = t // blk.tiles
        tile = (t - g * blk.tiles + blk.start_n // C.BLOCK_M) % blk.tiles
        return blk.h_kv * blk.GROUP + g, tile * C.BLOCK_M
    else:
        return blk.query(t, C)


@gluon.jit
def turn(blk: KeyBlock, h, start_m, WG: gl.constexpr, C: Config):
    """(the index of this warpgroup's counter for query tile m = start_m / BLOCK_M, this block's
    rank there); the counters are int32, (B, H, cdiv(N, BLOCK_M), 2), zeroed. m // R <= NB − 1 for
    every tile, so the rank is (m // R − j) mod NB; with the causal mask j <= m // R, no wrap."""
    m = start_m // C.BLOCK_M
    rank = m // (C.BLOCK_N // C.BLOCK_M) - blk.start_n // C.BLOCK_N
    if not C.IS_CAUSAL:
        num_n = gl.cdiv(blk.N, C.BLOCK_N)
        rank = (rank + num_n) % num_n
    num_m = blk.first + blk.tiles  # cdiv(N, BLOCK_M), from what the loop holds already
    # 32-bit: the counters number B·H·N·2 / BLOCK_M, past 2³¹ only where Q alone would exceed 8 TiB
    return ((blk.b * blk.H + h) * num_m + m) * 2 + WG, rank


@gluon.jit
def wait_turn(locks, index, rank):
    """Until counter `index` reads rank (every thread of the warpgroup polls)."""
    zero = gl.zeros([128], gl.int32, _WARPGROUP)
    gl.inline_asm_elementwise(_SPIN, "=r,l,r", [locks + index + zero, zero + rank], dtype=gl.int32,
                              is_pure=False, pack=1)


@gluon.jit
def pass_turn(locks, index):
    """The reduction this warpgroup issued on counter `index`'s share (a step before, or at the
    last step) completed in global memory, then the next key block's turn (one thread, release)."""
    gl.inline_asm_elementwise(_COMPLETE, "=r", [], dtype=gl.int32, is_pure=False, pack=1)
    gl.thread_barrier()  # the thread that issued the reduction has seen it complete
    gl.atomic_add(locks + index, 1, sem="release", scope="gpu")


def dq_locks(q: torch.Tensor, block_m: int) -> torch.Tensor:
    """The zeroed counters of `turn`: int32, one per (batch, query head, query tile, MMA
    warpgroup's share)."""
    B, H, N, _ = q.shape
    return torch.zeros(B, H, -(-N // block_m), 2, dtype=torch.int32, device=q.device)
