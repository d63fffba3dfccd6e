"""The backward's dK/dV kernel for Hopper (sm_90) in Gluon; the preprocess and the dQ pass stay
the tl ones (`minimodel.kernel.backward`), so the backward keeps its three launches, no atomics,
and is the same bit for bit from run to run.

One program per (key tile of BLOCK_N rows, batch, K/V head), as the tl dK/dV kernel: K and V land
once through TMA, dK and dV stay in registers (fp32, one 64-key slice per warpgroup) while every
query tile of every query head of the group streams past, in order. In transposed form (keys as
the rows of the warpgroup MMAs), every GEMM takes its left operand from shared memory or from
registers and its right one from shared memory, so P and dS never go through shared memory:
    Sᵀ = K Qᵀ,  dPᵀ = V dOᵀ,  Pᵀ = exp2(Sᵀ·scale·log2 e − LSE·log2 e),
    dV += Pᵀ dO,  dSᵀ = Pᵀ ∘ (dPᵀ − D),  dK += dSᵀ Q.
Q and dO come through TMA into a ring of STAGES buffers (`QueryRing`), STAGES − 1 steps ahead.
Step t issues Sᵀ(t), dPᵀ(t), then dV and dK of step t − 1, asynchronously; it waits for Sᵀ(t)
alone and takes the exponentials while the three other GEMMs run (FlashAttention-3's order, one
warpgroup per 64 keys, no warp specialization yet).

Query columns past N (a ragged tile) and, causal, queries before their key get P = 0; only the
diagonal band and the ragged tile pay for the mask. Key rows past N read as zeros and their dK,
dV rows are never stored (the 4-D descriptors bound every head). Aggregates (Triton's
`_aggregate`) hold what the steps share: `Tiles` the shapes and layouts, `KeyBlock` one program's
work, `QueryRing` the buffers. Gluon has no interpreter: this runs compiled on sm_90 only
(`backward.gluon_ok`), or is compiled for sm_90 on a machine without a GPU by tools/bwd_bench.py.
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
from triton.language.core import _aggregate as aggregate

from minimodel.kernel.hopper import _descriptor
from minimodel.kernel.launch import LOG2E, grid

_LOG2E = gl.constexpr(LOG2E)  # the forward's natural-log LSE in base 2
HEAD_DIMS = (64, 128)  # head dims the kernel is built, compiled and checked for
KEYS_PER_WARPGROUP = 64  # the M of one warpgroup's MMA: BLOCK_N = 64 · warpgroups


@aggregate
class Tiles:
    """The shapes of one program's tiles and the layouts of its tensors."""

    BLOCK_M: gl.constexpr  # query rows per step
    BLOCK_N: gl.constexpr  # keys per program, 64 per warpgroup
    HEAD_DIM: gl.constexpr
    STAGES: gl.constexpr  # Q/dO buffers
    IS_CAUSAL: gl.constexpr
    dtype: gl.constexpr
    st_layout: gl.constexpr  # Sᵀ, dPᵀ, Pᵀ in fp32: [BLOCK_N, BLOCK_M]
    acc_layout: gl.constexpr  # dK, dV: [BLOCK_N, HEAD_DIM]
    op_layout: gl.constexpr  # Pᵀ, dSᵀ as the register operand of dV += Pᵀ dO, dK += dSᵀ Q
    col_layout: gl.constexpr  # a value per query column of Sᵀ (LSE, D)
    key_layout: gl.constexpr  # a value per key row of Sᵀ
    kv_smem: gl.constexpr  # K, V (and dK, dV on the way out)
    q_smem: gl.constexpr  # Q, dO

    @gluon.constexpr_function
    def __init__(self, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, IS_CAUSAL, dtype, num_warps):
        self.BLOCK_M = gl.constexpr(BLOCK_M)
        self.BLOCK_N = gl.constexpr(BLOCK_N)
        self.HEAD_DIM = gl.constexpr(HEAD_DIM)
        self.STAGES = gl.constexpr(STAGES)
        self.IS_CAUSAL = gl.constexpr(IS_CAUSAL)
        self.dtype = gl.constexpr(dtype)
        # warpgroups stack along the keys: warpgroup w owns keys [64w, 64w + 64) of every tile
        st = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                       instr_shape=[16, BLOCK_M, 16])
        acc = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                        instr_shape=[16, HEAD_DIM, 16])
        self.st_layout = gl.constexpr(st)
        self.acc_layout = gl.constexpr(acc)
        self.op_layout = gl.constexpr(gl.DotOperandLayout(operand_index=0, parent=acc, k_width=2))
        self.col_layout = gl.constexpr(gl.SliceLayout(0, st))
        self.key_layout = gl.constexpr(gl.SliceLayout(1, st))
        self.kv_smem = gl.constexpr(gl.NVMMASharedLayout.get_default_for([BLOCK_N, HEAD_DIM], dtype))
        self.q_smem = gl.constexpr(gl.NVMMASharedLayout.get_default_for([BLOCK_M, HEAD_DIM], dtype))


@aggregate
class KeyBlock:
    """One program's work: dK, dV of the keys [start_n, start_n + BLOCK_N) of one (batch, K/V
    head), from the query tiles first … ⌈N/BLOCK_M⌉ − 1 of each of the GROUP query heads sharing
    it (causal: query tiles before start_n see none of these keys), in order."""

    b: gl.tensor
    h_kv: gl.tensor
    start_n: gl.tensor
    first: gl.tensor  # the first query tile of each head
    tiles: gl.tensor  # query tiles per head
    band_end: gl.tensor  # causal: query rows below it may precede a key of the block (else 0)
    H: gl.tensor
    N: gl.tensor
    GROUP: gl.tensor

    @gluon.constexpr_function
    def __init__(self, b, h_kv, start_n, first, tiles, band_end, H, N, GROUP):
        self.b = b
        self.h_kv = h_kv
        self.start_n = start_n
        self.first = first
        self.tiles = tiles
        self.band_end = band_end
        self.H = H
        self.N = N
        self.GROUP = GROUP

    @gluon.jit
    def create(H, N, GROUP, T, LAST_FIRST: gl.constexpr):
        """This program's block. Programs run key tile fastest (causal: the first key tiles, with
        the most query tiles, start first; with LAST_FIRST the last ones), all on the grid's x
        axis (B·H_kv past 65,535)."""
        num_n = gl.cdiv(N, T.BLOCK_N)
        pid = gl.program_id(0)
        pid_n = pid % num_n
        pid_bkv = pid // num_n
        H_kv = H // GROUP
        start_n = pid_n * T.BLOCK_N
        if LAST_FIRST:
            start_n = (num_n - 1) * T.BLOCK_N - start_n
        if T.IS_CAUSAL:
            first = start_n // T.BLOCK_M  # BLOCK_N is a multiple of BLOCK_M
            band_end = start_n + T.BLOCK_N
        else:
            first = start_n * 0
            band_end = start_n * 0
        tiles = gl.cdiv(N, T.BLOCK_M) - first
        return KeyBlock(pid_bkv // H_kv, pid_bkv % H_kv, start_n, first, tiles, band_end, H, N, GROUP)

    @gluon.jit
    def query(self, t, T):
        """(query head, first query row) of step t."""
        g = t // self.tiles
        return self.h_kv * self.GROUP + g, (self.first + t - g * self.tiles) * T.BLOCK_M

    @gluon.jit
    def row_stats(self, lse_ptr, delta_ptr, h, start_m, T):
        """LSE·log2 e and D of the step's query columns (0 past N, where P is masked to 0)."""
        cols = start_m + gl.arange(0, T.BLOCK_M, layout=T.col_layout)
        base = (self.b.to(gl.int64) * self.H + h) * self.N  # 64-bit: B·H·N may pass 2³¹
        inside = cols < self.N
        lse = gl.load(lse_ptr + base + cols, mask=inside, other=0.0) * _LOG2E
        delta = gl.load(delta_ptr + base + cols, mask=inside, other=0.0)
        return lse, delta

    @gluon.jit
    def probabilities(self, st, lse, start_m, qk_scale, T):
        """Pᵀ from Sᵀ; 0 where a query is past N or (causal) before the key. Only the diagonal
        band and the ragged query tile build the mask."""
        pt = gl.exp2(st * qk_scale - gl.expand_dims(lse, 0))
        if (start_m < self.band_end) | (start_m + T.BLOCK_M > self.N):
            cols = gl.expand_dims(start_m + gl.arange(0, T.BLOCK_M, layout=T.col_layout), 0)
            valid = cols < self.N
            if T.IS_CAUSAL:
                keys = gl.expand_dims(self.start_n + gl.arange(0, T.BLOCK_N, layout=T.key_layout), 1)
                valid = valid & (cols >= keys)
            pt = gl.where(valid, pt, 0.0)
        return pt


@aggregate
class QueryRing:
    """Q and dO of the next STAGES steps in shared memory; TMA completes stage s's mbarrier when
    both have landed there (once per pass over the ring)."""

    q_desc: tma.tensor_descriptor
    do_desc: tma.tensor_descriptor
    q: gl.shared_memory_descriptor  # [STAGES, BLOCK_M, HEAD_DIM]
    do: gl.shared_memory_descriptor
    ready: gl.shared_memory_descriptor  # [STAGES, 1] mbarriers

    @gluon.constexpr_function
    def __init__(self, q_desc, do_desc, q, do, ready):
        self.q_desc = q_desc
        self.do_desc = do_desc
        self.q = q
        self.do = do
        self.ready = ready

    @gluon.jit
    def create(q_desc, do_desc, T):
        q = gl.allocate_shared_memory(T.dtype, [T.STAGES, T.BLOCK_M, T.HEAD_DIM], T.q_smem)
        do = gl.allocate_shared_memory(T.dtype, [T.STAGES, T.BLOCK_M, T.HEAD_DIM], T.q_smem)
        ready = gl.allocate_shared_memory(gl.int64, [T.STAGES, 1], mbarrier.MBarrierLayout())
        for s in gl.static_range(T.STAGES):
            mbarrier.init(ready.index(s), count=1)
        return QueryRing(q_desc, do_desc, q, do, ready)

    @gluon.jit
    def load(self, blk, t, total, T):
        """Issue step t's Q and dO into stage t % STAGES (nothing once t reaches total). The
        caller has made sure every warpgroup is done with the stage's previous step."""
        s = t % T.STAGES
        h, start_m = blk.query(t, T)
        pred = t < total
        mbarrier.expect(self.ready.index(s), 2 * self.q_desc.block_type.nbytes, pred=pred)
        tma.async_copy_global_to_shared(self.q_desc, [blk.b, h, start_m, 0], self.ready.index(s),
                                        self.q.index(s), pred=pred)
        tma.async_copy_global_to_shared(self.do_desc, [blk.b, h, start_m, 0], self.ready.index(s),
                                        self.do.index(s), pred=pred)

    @gluon.jit
    def wait(self, t, T):
        """Q and dO of step t, once landed."""
        s = t % T.STAGES
        mbarrier.wait(self.ready.index(s), (t // T.STAGES) & 1)
        return self.q.index(s), self.do.index(s)


@gluon.jit
def _scores(k_smem, v_smem, q, do, T):
    """Issue Sᵀ = K Qᵀ and dPᵀ = V dOᵀ, asynchronously, in that order."""
    zeros = gl.zeros([T.BLOCK_N, T.BLOCK_M], gl.float32, T.st_layout)
    st = warpgroup_mma(k_smem, q.permute((1, 0)), zeros, use_acc=False, is_async=True)
    dpt = warpgroup_mma(v_smem, do.permute((1, 0)), zeros, use_acc=False, is_async=True)
    return st, dpt


@gluon.jit
def _operands(pt, dpt, delta, T):
    """Pᵀ and dSᵀ = Pᵀ ∘ (dPᵀ − D) in the inputs' dtype, as left operands from registers."""
    dst = pt * (dpt - gl.expand_dims(delta, 0))
    return gl.convert_layout(pt.to(T.dtype), T.op_layout), gl.convert_layout(dst.to(T.dtype), T.op_layout)


@gluon.jit(do_not_specialize=["H", "N", "GROUP"])
def _bwd_dkdv_hopper(q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc, lse_ptr, delta_ptr, qk_scale,
                     sm_scale, H, N, GROUP, BLOCK_M: gl.constexpr, STAGES: gl.constexpr,
                     IS_CAUSAL: gl.constexpr):
    """dK, dV of one key tile of one (batch, K/V head), summed over its GROUP query heads."""
    T = Tiles(BLOCK_M, k_desc.block_type.shape[2], k_desc.block_type.shape[3], STAGES, IS_CAUSAL,
                            k_desc.dtype, gl.num_warps())
    blk = KeyBlock.create(H, N, GROUP, T, False)
    ring = QueryRing.create(q_desc, do_desc, T)
    k_smem = gl.allocate_shared_memory(T.dtype, [T.BLOCK_N, T.HEAD_DIM], T.kv_smem)
    v_smem = gl.allocate_shared_memory(T.dtype, [T.BLOCK_N, T.HEAD_DIM], T.kv_smem)
    kv_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_ready, count=1)
    mbarrier.expect(kv_ready, 2 * k_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [blk.b, blk.h_kv, blk.start_n, 0], kv_ready, k_smem)
    tma.async_copy_global_to_shared(v_desc, [blk.b, blk.h_kv, blk.start_n, 0], kv_ready, v_smem)
    total = blk.tiles * GROUP
    for s in gl.static_range(STAGES - 1):
        ring.load(blk, s, total, T)
    mbarrier.wait(kv_ready, 0)

    # step 0: no dV, dK of a step before it
    q, do = ring.wait(0, T)
    h, start_m = blk.query(0, T)
    lse, delta = blk.row_stats(lse_ptr, delta_ptr, h, start_m, T)
    st, dpt = _scores(k_smem, v_smem, q, do, T)
    st = warpgroup_mma_wait(1, deps=[st])
    pt = blk.probabilities(st, lse, start_m, qk_scale, T)
    dpt = warpgroup_mma_wait(0, deps=[dpt])
    p16, ds16 = _operands(pt, dpt, delta, T)
    ring.load(blk, STAGES - 1, total, T)  # into a stage no step has used
    dk = gl.zeros([T.BLOCK_N, T.HEAD_DIM], gl.float32, T.acc_layout)
    dv = gl.zeros([T.BLOCK_N, T.HEAD_DIM], gl.float32, T.acc_layout)

    for t in range(1, total):
        q_prev = ring.q.index((t - 1) % STAGES)
        do_prev = ring.do.index((t - 1) % STAGES)
        q, do = ring.wait(t, T)
        h, start_m = blk.query(t, T)
        lse, delta = blk.row_stats(lse_ptr, delta_ptr, h, start_m, T)
        st, dpt = _scores(k_smem, v_smem, q, do, T)
        dv = warpgroup_mma(p16, do_prev, dv, is_async=True)  # step t − 1's
        dk = warpgroup_mma(ds16, q_prev, dk, is_async=True)
        st = warpgroup_mma_wait(3, deps=[st])  # Sᵀ(t) done; dPᵀ(t), dV, dK run on
        pt = blk.probabilities(st, lse, start_m, qk_scale, T)
        dpt, dv, dk, p16, ds16 = warpgroup_mma_wait(0, deps=[dpt, dv, dk, p16, ds16])
        p16, ds16 = _operands(pt, dpt, delta, T)
        gl.thread_barrier()  # both warpgroups are done with stage t − 1: it takes step t + STAGES − 1
        ring.load(blk, t + STAGES - 1, total, T)

    last = (total - 1) % STAGES
    dv = warpgroup_mma(p16, ring.do.index(last), dv, is_async=True)
    dk = warpgroup_mma(ds16, ring.q.index(last), dk, is_async=True)
    dv, dk, p16, ds16 = warpgroup_mma_wait(0, deps=[dv, dk, p16, ds16])

    # dK and dV leave through TMA from K's and V's buffers; rows past N are dropped
    gl.thread_barrier()  # every warpgroup's last GEMM has read K and V
    k_smem.store((dk * sm_scale).to(T.dtype))
    v_smem.store(dv.to(T.dtype))
    fence_async_shared()
    gl.thread_barrier()
    tma.async_copy_shared_to_global(dk_desc, [blk.b, blk.h_kv, blk.start_n, 0], k_smem)
    tma.async_copy_shared_to_global(dv_desc, [blk.b, blk.h_kv, blk.start_n, 0], v_smem)
    tma.store_wait(0)


def dkdv_launch(q, k, v, do, dk, dv, lse, delta, scale: float, cfg, causal: bool):
    """(kernel, grid, arguments, launch options) of the dK/dV launch for `cfg` (a `BwdConfig` with
    GLUON in one partition: BLOCK_M1 query rows per step, BLOCK_N1 keys per program, num_warps_kv =
    BLOCK_N1 / 16, num_stages_kv Q/dO buffers; the warp-specialized one is `gluon_bwd_ws`'s). q, k,
    v, do must be readable by TMA (`backward.gluon_ok`)."""
    B, H, N, _ = q.shape
    H_kv = k.shape[1]
    args = dict(q_desc=_descriptor(q, cfg.BLOCK_M1), k_desc=_descriptor(k, cfg.BLOCK_N1),
                v_desc=_descriptor(v, cfg.BLOCK_N1), do_desc=_descriptor(do, cfg.BLOCK_M1),
                dk_desc=_descriptor(dk, cfg.BLOCK_N1), dv_desc=_descriptor(dv, cfg.BLOCK_N1),
                lse_ptr=lse, delta_ptr=delta, qk_scale=scale * LOG2E, sm_scale=scale, H=H, N=N,
                GROUP=H // H_kv, BLOCK_M=cfg.BLOCK_M1, STAGES=cfg.num_stages_kv, IS_CAUSAL=bool(causal))
    programs = grid(N, B * H_kv, cfg.BLOCK_N1)
    return _bwd_dkdv_hopper, programs, args, {"num_warps": cfg.num_warps_kv}
