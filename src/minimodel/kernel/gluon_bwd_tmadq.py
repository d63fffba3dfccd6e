"""dQ in the warp-specialized backward by TMA reductions (issue 39): FlashAttention-3's way, beside
`gluon_bwd_ws`'s two (the tl dQ pass, deterministic; fp32 atomics from the MMA warpgroups).

The kernel is `gluon_bwd_ws`'s with DQ_ATOMIC's five GEMMs: the same producer, and per step each MMA
warpgroup computes its share of the query tile's dQ = dS K (`_dq_mma`). Only that share's way out
differs: instead of one atomic add per element from registers, the warpgroup stores scale · dQ
into its own float32 tile in shared memory and one thread hands the tile to the TMA engine, which
adds it into the float32 dQ accumulator (`cp.reduce.async.bulk.tensor`, `gluon_tma`), clipped at
N by the 4-D descriptor. The warpgroup goes on with the next step while the engine reads the tile;
it waits for that read (`tma.store_wait`) only before writing the tile again, a step later.

Like the atomics, the additions of different programs into one dQ element come in an unspecified
order, so dQ's last bits may differ between runs: not deterministic. Kept apart from
`gluon_bwd_ws` until it is measured on a GPU against the two ways there; `flash_attn_backward_tmadq`
is its entry, `flash_attn_backward`'s contract with a warp-specialized configuration.
"""

# no `from __future__ import annotations`: an aggregate checks its fields against their annotations

from dataclasses import replace

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

from minimodel.kernel import backward, gluon_backward
from minimodel.kernel.bwd_config import gluon_ok, gluon_ws_config
from minimodel.kernel.gluon_backward import KeyBlock
from minimodel.kernel.gluon_bwd_ring import Config, Descriptors, Grads, Ring
from minimodel.kernel.gluon_bwd_ws import MMA_REGS, _dq_mma, _probabilities, _produce, _store_rows
from minimodel.kernel.gluon_tma import async_reduce_shared_to_global
from minimodel.kernel.hopper import _descriptor
from minimodel.kernel.launch import LOG2E, grid

_LOG2E = gl.constexpr(LOG2E)


def dq_share(block_m: int, head_dim: int) -> tuple[int, int]:
    """(rows, columns) of one MMA warpgroup's share of a query tile's dQ: `Config`'s DQ_M, DQ_N."""
    return (block_m // 2, head_dim) if block_m >= 128 else (block_m, head_dim // 2)


@gluon.constexpr_function
def _share_layout(rows, cols):
    return gl.NVMMASharedLayout.get_default_for([rows, cols], gl.float32)


@gluon.jit
def _dq_reduce(dq, tile, dq_desc, g: Grads, blk: KeyBlock, h, start_m, WG: gl.constexpr, C: Config):
    """scale · this warpgroup's share of dQ into its shared tile, then added into dQ by TMA."""
    if C.DQ_ROWS:
        row0 = start_m + WG * C.DQ_M
        col0 = 0
    else:
        row0 = start_m
        col0 = WG * C.DQ_N
    tma.store_wait(0)  # the thread that issued the last step's reduction: the engine has read the tile
    gl.thread_barrier()  # ... and every thread knows it before writing the tile again
    tile.store(dq * g.sm_scale)
    fence_async_shared()  # the generic-proxy stores, before the TMA engine reads them
    gl.thread_barrier()
    async_reduce_shared_to_global(dq_desc, [blk.b, h, row0, col0], tile)


@gluon.jit
def _mma(ring: Ring, tile, dq_desc, blk: KeyBlock, total, g: Grads, WG: gl.constexpr, C: Config):
    """`gluon_bwd_ws._mma` with DQ_ATOMIC, dQ's share leaving by `_dq_reduce`."""
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
        delta = ring.delta.index(s).load(C.col_layout)
        dpt = warpgroup_mma(v, do.permute((1, 0)), zeros - gl.expand_dims(delta, 0), is_async=True)
        h, start_m = blk.query(t, C)
        st = warpgroup_mma_wait(1, deps=[st])
        lse = ring.lse.index(s).load(C.col_layout) * _LOG2E
        pt = _probabilities(st, lse, blk, start_m, g.qk_scale, WG, C)
        p16 = gl.convert_layout(pt.to(C.dtype), C.op_layout)
        dv = warpgroup_mma(p16, do, dv, is_async=True)
        dpt, dv, p16 = warpgroup_mma_wait(0, deps=[dpt, dv, p16])
        dst = (pt * dpt).to(C.dtype)
        ds16 = gl.convert_layout(dst, C.op_layout)
        dk = warpgroup_mma(ds16, q, dk, is_async=True)
        dq = _dq_mma(ring, t, dst, WG, C)
        dk, dq, ds16 = warpgroup_mma_wait(0, deps=[dk, dq, ds16])
        mbarrier.arrive(ring.empty.index(s), count=1)
        _dq_reduce(dq, tile, dq_desc, g, blk, h, start_m, WG, C)
    _store_rows(g.dk, dk * g.sm_scale, blk, WG, C)
    _store_rows(g.dv, dv, blk, WG, C)
    tma.store_wait(0)  # the shared tile stays until the engine has read it


@gluon.jit(do_not_specialize=["H", "N", "GROUP"])
def _bwd_dkdv_tmadq(q_desc, do_desc, k_desc, v_desc, dq_desc, lse, delta, dk_ptr, dv_ptr, qk_scale, sm_scale,
                    H, N, GROUP, BLOCK_M: gl.constexpr, STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr,
                    WORKER_REGS: gl.constexpr):
    """dK, dV of 128 keys of one (batch, K/V head), summed over its GROUP query heads, and their
    share of dQ added into the float32 accumulator behind dq_desc."""
    C = Config(BLOCK_M, k_desc.block_type.shape[2], k_desc.block_type.shape[3], STAGES, IS_CAUSAL, True,
               k_desc.dtype)
    blk = KeyBlock.create(H, N, GROUP, C)
    total = blk.tiles * GROUP
    ring = Ring.create(C)
    tiles = gl.allocate_shared_memory(gl.float32, [2, C.DQ_M, C.DQ_N], _share_layout(C.DQ_M, C.DQ_N))
    descs = Descriptors(q_desc, do_desc, k_desc, v_desc, lse, delta)
    g = Grads(dk_ptr, dv_ptr, dk_ptr, qk_scale, sm_scale)  # dq: unused here (dq_desc), a field holds a value
    gl.warp_specialize([
        (_produce, (descs, ring, blk, total, C)),
        (_mma, (ring, tiles.index(0), dq_desc, blk, total, g, 0, C)),
        (_mma, (ring, tiles.index(1), dq_desc, blk, total, g, 1, C)),
    ], [4, 4], [WORKER_REGS, WORKER_REGS])


def dq_descriptor(dq: torch.Tensor, block_m: int) -> TensorDescriptor:
    """A 4-D descriptor over the contiguous float32 (B, H, N, d) accumulator, a box one warpgroup's
    share: rows past N of a head are clipped, never added into the next head's."""
    rows, cols = dq_share(block_m, dq.shape[-1])
    head = dq.shape[-1] * dq.shape[-2]
    strides = [s if n > 1 else head for n, s in zip(dq.shape, dq.stride(), strict=True)]
    layout = gl.NVMMASharedLayout.get_default_for([1, 1, rows, cols], gl.float32)
    return TensorDescriptor(dq, list(dq.shape), strides, [1, 1, rows, cols], layout)


def dkdv_launch(q, k, v, do, dq, dk, dv, lse, delta, scale: float, cfg, causal: bool):
    """(kernel, grid, arguments, launch options): `gluon_bwd_ws.dkdv_launch`'s with cfg.ATOMIC_DQ,
    dq the zeroed contiguous float32 accumulator."""
    B, H, N, _ = q.shape
    args = dict(q_desc=_descriptor(q, cfg.BLOCK_M1), do_desc=_descriptor(do, cfg.BLOCK_M1),
                k_desc=_descriptor(k, cfg.BLOCK_N1), v_desc=_descriptor(v, cfg.BLOCK_N1),
                dq_desc=dq_descriptor(dq, cfg.BLOCK_M1), lse=lse, delta=delta, dk_ptr=dk, dv_ptr=dv,
                qk_scale=scale * LOG2E, sm_scale=scale, H=H, N=N, GROUP=H // k.shape[1],
                BLOCK_M=cfg.BLOCK_M1, STAGES=cfg.num_stages_kv, IS_CAUSAL=bool(causal),
                WORKER_REGS=MMA_REGS.value)
    return _bwd_dkdv_tmadq, grid(N, B * k.shape[1], cfg.BLOCK_N1), args, {"num_warps": 4}


def tmadq_config(head_dim: int, causal: bool, block_m: int | None = None, stages: int | None = None):
    """The atomic-dQ configuration of the warp-specialized kernel (`gluon_ws_config`), its query
    rows and ring stages replaceable (the TMA way frees the atomics' address registers)."""
    cfg = gluon_ws_config(head_dim, causal, atomic_dq=True)
    return replace(cfg, BLOCK_M1=block_m or cfg.BLOCK_M1, num_stages_kv=stages or cfg.num_stages_kv)


def flash_attn_backward_tmadq(q, k, v, o, lse, do, causal: bool = False, sm_scale: float | None = None,
                              config=None):
    """(dQ, dK, dV) as `backward.flash_attn_backward` gives them, by this kernel (Hopper, d = 64 or
    128, inputs TMA can read: `bwd_config.gluon_ok`); config: `tmadq_config`'s by default."""
    backward._validate(q, k, v, o, lse, do)
    if not gluon_ok(q, k, v, do):
        raise ValueError("the TMA-dQ backward needs compiled Triton on Hopper, d in "
                         f"{gluon_backward.HEAD_DIMS} and inputs TMA can read (unit stride on d, 16-byte "
                         f"strides and base); got d = {q.shape[-1]} on {q.device}")
    B, H, N, d = q.shape
    scale = backward._scale(d, sm_scale)
    cfg = config or tmadq_config(d, causal)
    q, k, v, o, do = (t.detach() for t in (q, k, v, o, do))
    lse = lse.detach().contiguous()
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    delta = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
    pre = backward.arguments(q, k, v, o, lse, do, dq, dk, dv, delta, scale, cfg, causal)[0]
    main = dkdv_launch(q, k, v, do, dq, dk, dv, lse, delta, scale, cfg, causal)
    for kernel, grid_, args, options in (pre, main):
        kernel[grid_](**args, **options)
    return dq.to(q.dtype), dk, dv
