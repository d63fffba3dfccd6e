"""How an MMA warpgroup of the warp-specialized backward (`gluon_bwd_ws`) adds its share of a query
tile's dQ (scale · dS K, float32) into the global float32 dQ, with DQ_ATOMIC:
- by atomic adds from registers (`_dq_add`);
- with DQ_TMA, FlashAttention-3's way: stored to a shared tile of the warpgroup's own, which the TMA
  engine adds into dQ (`_dq_reduce`, a `cp.reduce.async.bulk.tensor` through a 4-D descriptor that
  clips rows past N, `dq_descriptor`) while the warpgroup goes on;
- with DQ_ORDERED, those reductions in a fixed order of the key blocks (`gluon_bwd_order`): the
  warpgroup waits for its turn on the tile before its reduction, and hands the turn on a step
  later, once the reduction has completed (by then it has), so that it never waits for its own.
Without DQ_ORDERED the additions' order, so dQ's last bits, vary between calls.
"""

# no `from __future__ import annotations`: an aggregate checks its fields against their annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, tma
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from minimodel.kernel.gluon_backward import KeyBlock
from minimodel.kernel.gluon_bwd_order import pass_turn, turn, wait_turn
from minimodel.kernel.gluon_bwd_ring import Config, Grads, Ring, dq_share
from minimodel.kernel.gluon_tma import async_reduce_shared_to_global


@gluon.jit
def dq_out(dq, dq_desc, ring: Ring, g: Grads, blk: KeyBlock, turn_held, h, start_m, WG: gl.constexpr,
           C: Config):
    """This share of dQ (query head h, rows from start_m), times the softmax scale, added into the
    float32 dQ: by TMA reductions or atomics. turn_held: with DQ_ORDERED, the counter whose turn
    the last step's reduction holds (−1 at the first); returns the one this step's holds."""
    if C.DQ_TMA:
        turn_held = _dq_reduce(dq, dq_desc, ring, g, blk, turn_held, h, start_m, WG, C)
    else:
        _dq_add(dq, g, blk, h, start_m, WG, C)
    return turn_held


@gluon.jit
def dq_last(g: Grads, turn_held, C: Config):
    """After the last step (DQ_TMA): its reduction read (the shared tile stays until then) and,
    ordered, complete and its turn handed on."""
    tma.store_wait(0)
    if C.DQ_ORDERED:
        pass_turn(g.locks, turn_held)


@gluon.jit
def _dq_origin(start_m, WG: gl.constexpr, C: Config):
    """(first row, first column) of this warpgroup's share of the query tile's dQ."""
    if C.DQ_ROWS:
        return start_m + WG * C.DQ_M, 0
    else:
        return start_m, WG * C.DQ_N


@gluon.jit
def _dq_add(dq, g: Grads, blk: KeyBlock, h, start_m, WG: gl.constexpr, C: Config):
    """Add scale · this share of dQ to g.dq (float32, contiguous (B, H, N, d)); rows past N are not."""
    row0, col0 = _dq_origin(start_m, WG, C)
    r = gl.expand_dims(gl.arange(0, C.DQ_M, layout=gl.SliceLayout(1, C.dq_layout)), 1)
    c = gl.expand_dims(gl.arange(0, C.DQ_N, layout=gl.SliceLayout(0, C.dq_layout)), 0)
    base = g.dq + ((blk.b.to(gl.int64) * blk.H + h) * blk.N + row0) * C.HEAD_DIM + col0
    if start_m + C.BLOCK_M <= blk.N:  # only the ragged tile pays for the mask (and its registers)
        gl.atomic_add(base + r * C.HEAD_DIM + c, dq * g.sm_scale, sem="relaxed")
    else:
        gl.atomic_add(base + r * C.HEAD_DIM + c, dq * g.sm_scale, mask=r < blk.N - row0, sem="relaxed")


@gluon.jit
def _dq_reduce(dq, dq_desc, ring: Ring, g: Grads, blk: KeyBlock, turn_held, h, start_m, WG: gl.constexpr,
               C: Config):
    """Store scale · this share of dQ to the warpgroup's shared tile, and have the TMA engine add
    it into the float32 dQ behind dq_desc (rows past N clipped by the descriptor)."""
    row0, col0 = _dq_origin(start_m, WG, C)
    tile = ring.dq.index(WG)
    tma.store_wait(0)  # in the thread that issued the last step's reduction: the engine has read the tile
    gl.thread_barrier()  # ... before any thread of the warpgroup writes it again
    tile.store(dq * g.sm_scale)
    fence_async_shared()  # the generic-proxy stores, before the TMA engine reads them
    gl.thread_barrier()
    if C.DQ_ORDERED:  # the last step's turn handed on, then this key block's turn on this share
        if turn_held >= 0:
            pass_turn(g.locks, turn_held)
        turn_held, rank = turn(blk, h, start_m, WG, C)
        wait_turn(g.locks, turn_held, rank)
    async_reduce_shared_to_global(dq_desc, [blk.b, h, row0, col0], tile)
    return turn_held


def dq_descriptor(dq: torch.Tensor, block_m: int) -> TensorDescriptor:
    """A 4-D descriptor over the contiguous float32 (B, H, N, d) dQ, a box one warpgroup's share
    (DQ_TMA): rows past N of a head are clipped, never added into the next head's."""
    rows, cols = dq_share(block_m, dq.shape[-1])
    head = dq.shape[-1] * dq.shape[-2]
    strides = [s if n > 1 else head for n, s in zip(dq.shape, dq.stride(), strict=True)]
    layout = gl.NVMMASharedLayout.get_default_for([1, 1, rows, cols], gl.float32)
    return TensorDescriptor(dq, list(dq.shape), strides, [1, 1, rows, cols], layout)
