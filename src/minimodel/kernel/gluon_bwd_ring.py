"""What the partitions of the warp-specialized Gluon backward (`gluon_bwd_ws`) share: the
constexpr shapes and layouts (`Config`), the shared memory and the barriers between the
partitions, allocated in one place (`Ring`), the TMA descriptors (`Descriptors`) and where the
gradients go (`Grads`). Aggregates (Triton's `_aggregate`): each passes to a partition as one
argument.
"""

# no `from __future__ import annotations`: an aggregate checks its fields against their annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma
from triton.language.core import _aggregate as aggregate

# LSE and D in shared memory (a stage is [BLOCK_M] of them): as the producer's plain stores write
# them, or (ROWS_TMA) unswizzled, as a 1-D TMA box lands
ROW_LAYOUT = gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[0])
ROW_TMA_LAYOUT = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=1)


@gluon.constexpr_function
def dq_share(block_m: int, head_dim: int) -> tuple[int, int]:
    """(rows, columns) of one MMA warpgroup's share of a query tile's dQ: a warpgroup MMA has 64
    rows, so the rows are split only where each half has 64, else the head dim."""
    return (block_m // 2, head_dim) if block_m >= 128 else (block_m, head_dim // 2)


@aggregate
class Config:
    """Shapes and layouts, all constexpr; the register layouts are one MMA warpgroup's."""

    BLOCK_M: gl.constexpr  # query rows per step
    BLOCK_N: gl.constexpr  # keys per program: 64 per MMA warpgroup
    WG_KEYS: gl.constexpr
    HEAD_DIM: gl.constexpr
    STAGES: gl.constexpr
    IS_CAUSAL: gl.constexpr
    DQ_ATOMIC: gl.constexpr  # dQ in the kernel (fp32, added to), by atomics or (DQ_TMA) TMA reductions
    DQ_TMA: gl.constexpr
    DQ_ORDERED: gl.constexpr  # DQ_TMA's additions in a fixed order (`gluon_bwd_order`): deterministic
    ROWS_TMA: gl.constexpr  # LSE and D by 1-D TMA (only where N % 4 = 0), else by the producer's loads
    READY_ARRIVALS: gl.constexpr  # the producer's arrivals on ready[s] per step (`Ring`)
    DQ_ROWS: gl.constexpr  # dQ split between the warpgroups by rows (else by head-dim columns)
    SMEM_OPERANDS: gl.constexpr  # Pᵀ and dSᵀ to dV's and dK's GEMMs through shared memory (`_through_shared`)
    DQ_M: gl.constexpr  # rows of one warpgroup's share of a query tile's dQ
    DQ_N: gl.constexpr  # its columns
    dtype: gl.constexpr
    st_layout: gl.constexpr  # Sᵀ, dPᵀ, Pᵀ, dSᵀ in fp32: [WG_KEYS, BLOCK_M]
    acc_layout: gl.constexpr  # dK, dV: [WG_KEYS, HEAD_DIM]
    op_layout: gl.constexpr  # Pᵀ, dSᵀ as the left operand from registers
    dq_layout: gl.constexpr  # one warpgroup's half of dQ
    col_layout: gl.constexpr  # a value per query column of Sᵀ (LSE, D)
    key_layout: gl.constexpr  # a value per key row of Sᵀ
    kv_smem: gl.constexpr  # K, V: [BLOCK_N, HEAD_DIM]
    q_smem: gl.constexpr  # Q, dO: [BLOCK_M, HEAD_DIM]
    ds_smem: gl.constexpr  # dSᵀ of both warpgroups: [BLOCK_N, BLOCK_M]
    dq_smem: gl.constexpr  # one warpgroup's float32 share of dQ: [DQ_M, DQ_N]
    row_smem: gl.constexpr  # LSE, D: [BLOCK_M] float32
    row_layout: gl.constexpr  # LSE, D in the producer's registers: a value per thread

    @gluon.constexpr_function
    def __init__(self, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, IS_CAUSAL, DQ_ATOMIC, dtype, ROWS_TMA=False,
                 DQ_TMA=False, DQ_ORDERED=False):
        self.BLOCK_M = gl.constexpr(BLOCK_M)
        self.BLOCK_N = gl.constexpr(BLOCK_N)
        self.WG_KEYS = gl.constexpr(BLOCK_N // 2)
        self.HEAD_DIM = gl.constexpr(HEAD_DIM)
        self.STAGES = gl.constexpr(STAGES)
        self.IS_CAUSAL = gl.constexpr(IS_CAUSAL)
        self.DQ_ATOMIC = gl.constexpr(DQ_ATOMIC)
        self.DQ_TMA = gl.constexpr(DQ_TMA)
        self.DQ_ORDERED = gl.constexpr(DQ_ORDERED)
        self.ROWS_TMA = gl.constexpr(ROWS_TMA)
        self.READY_ARRIVALS = gl.constexpr(1 if ROWS_TMA else 2)
        # a warpgroup MMA has 64 rows: split the rows only where each half has 64
        self.DQ_ROWS = gl.constexpr(BLOCK_M >= 128)
        # with dQ in the kernel at 128 query rows, Pᵀ's and dSᵀ's register operands would spill
        self.SMEM_OPERANDS = gl.constexpr(bool(DQ_ATOMIC) and BLOCK_M >= 128)
        dq_rows, dq_cols = dq_share(BLOCK_M, HEAD_DIM)
        self.DQ_M = gl.constexpr(dq_rows)
        self.DQ_N = gl.constexpr(dq_cols)
        self.dtype = gl.constexpr(dtype)
        st = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_M, 16])
        acc = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM, 16])
        self.st_layout = gl.constexpr(st)
        self.acc_layout = gl.constexpr(acc)
        self.op_layout = gl.constexpr(gl.DotOperandLayout(operand_index=0, parent=acc, k_width=2))
        self.dq_layout = gl.constexpr(gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                                instr_shape=[16, self.DQ_N, 16]))
        self.col_layout = gl.constexpr(gl.SliceLayout(0, st))
        self.key_layout = gl.constexpr(gl.SliceLayout(1, st))
        self.kv_smem = gl.constexpr(gl.NVMMASharedLayout.get_default_for([BLOCK_N, HEAD_DIM], dtype))
        self.q_smem = gl.constexpr(gl.NVMMASharedLayout.get_default_for([BLOCK_M, HEAD_DIM], dtype))
        self.ds_smem = gl.constexpr(gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_M], dtype))
        self.dq_smem = gl.constexpr(gl.NVMMASharedLayout.get_default_for([dq_rows, dq_cols], gl.float32))
        self.row_smem = gl.constexpr(ROW_TMA_LAYOUT if ROWS_TMA else ROW_LAYOUT)
        self.row_layout = gl.constexpr(gl.BlockedLayout([1], [32], [4], [0]))  # the producer's warpgroup


@aggregate
class Ring:
    """The shared memory and the barriers that connect the partitions, allocated in one place
    (`create`). Who arrives and who waits:
    - kv_ready: TMA completes it when K and V have landed (the producer expects their bytes);
      each MMA warpgroup waits once.
    - ready[s] (count 2): stage s holds Q, dO, LSE and D of a step. The producer arrives twice:
      once with Q's and dO's bytes expected (TMA completes those), once after its warpgroup has
      stored LSE and D there; the MMA warpgroups wait on it, once per pass over the ring. (With
      ROWS_TMA, count 1: LSE's and D's bytes are expected with Q's.)
    - empty[s] (count 2): each MMA warpgroup arrives when its GEMMs of the step in stage s are
      done; the producer waits on it before loading stage s again.
    - ds_ready[i] (count 2, DQ_ATOMIC): each MMA warpgroup arrives when its dSᵀ rows of a step are
      in ds[i] (i = step % 2); both wait on it before dQ = dS K reads both halves. Two buffers: a
      warpgroup writes ds[i] again only after passing step + 1's wait, so after the other one's
      dQ GEMM of this step has completed.
    And dq[w] (DQ_TMA): MMA warpgroup w's float32 share of a step's dQ, which the TMA engine reads
    to add it into global memory; w waits for that read (`tma.store_wait`) before writing it again."""

    k: gl.shared_memory_descriptor  # [BLOCK_N, HEAD_DIM]
    v: gl.shared_memory_descriptor
    q: gl.shared_memory_descriptor  # [STAGES, BLOCK_M, HEAD_DIM]
    do: gl.shared_memory_descriptor
    lse: gl.shared_memory_descriptor  # [STAGES, BLOCK_M] float32
    delta: gl.shared_memory_descriptor
    ds: gl.shared_memory_descriptor  # [2, BLOCK_N, BLOCK_M]
    dq: gl.shared_memory_descriptor  # [2, DQ_M, DQ_N] float32
    kv_ready: gl.shared_memory_descriptor
    ready: gl.shared_memory_descriptor
    empty: gl.shared_memory_descriptor
    ds_ready: gl.shared_memory_descriptor

    @gluon.constexpr_function
    def __init__(self, k, v, q, do, lse, delta, ds, dq, kv_ready, ready, empty, ds_ready):
        self.k = k
        self.v = v
        self.q = q
        self.do = do
        self.lse = lse
        self.delta = delta
        self.ds = ds
        self.dq = dq
        self.kv_ready = kv_ready
        self.ready = ready
        self.empty = empty
        self.ds_ready = ds_ready

    @gluon.jit
    def create(C):
        bar: gl.constexpr = mbarrier.MBarrierLayout()
        k = gl.allocate_shared_memory(C.dtype, [C.BLOCK_N, C.HEAD_DIM], C.kv_smem)
        v = gl.allocate_shared_memory(C.dtype, [C.BLOCK_N, C.HEAD_DIM], C.kv_smem)
        q = gl.allocate_shared_memory(C.dtype, [C.STAGES, C.BLOCK_M, C.HEAD_DIM], C.q_smem)
        do = gl.allocate_shared_memory(C.dtype, [C.STAGES, C.BLOCK_M, C.HEAD_DIM], C.q_smem)
        lse = gl.allocate_shared_memory(gl.float32, [C.STAGES, C.BLOCK_M], C.row_smem)
        delta = gl.allocate_shared_memory(gl.float32, [C.STAGES, C.BLOCK_M], C.row_smem)
        # without DQ_ATOMIC nothing uses ds (nor, without DQ_TMA, dq) and the compiler drops it (a
        # field must hold a value)
        ds = gl.allocate_shared_memory(C.dtype, [2, C.BLOCK_N, C.BLOCK_M], C.ds_smem)
        dq = gl.allocate_shared_memory(gl.float32, [2, C.DQ_M, C.DQ_N], C.dq_smem)
        kv_ready = gl.allocate_shared_memory(gl.int64, [1], bar)
        ready = gl.allocate_shared_memory(gl.int64, [C.STAGES, 1], bar)
        empty = gl.allocate_shared_memory(gl.int64, [C.STAGES, 1], bar)
        ds_ready = gl.allocate_shared_memory(gl.int64, [2, 1], bar)
        mbarrier.init(kv_ready, count=1)
        for s in gl.static_range(C.STAGES):
            mbarrier.init(ready.index(s), count=C.READY_ARRIVALS)
            mbarrier.init(empty.index(s), count=2)
        for i in gl.static_range(2):
            mbarrier.init(ds_ready.index(i), count=2)
        return Ring(k, v, q, do, lse, delta, ds, dq, kv_ready, ready, empty, ds_ready)


@aggregate
class Descriptors:
    """What the producer reads: TMA descriptors of Q, dO, K, V, 4-D (B, H, N, d); LSE and D,
    contiguous float32 (B, H, N), as pointers, or with ROWS_TMA as 1-D descriptors over (B·H·N)."""

    q: tma.tensor_descriptor
    do: tma.tensor_descriptor
    k: tma.tensor_descriptor
    v: tma.tensor_descriptor
    lse: gl.base_value  # a pointer, or a descriptor (ROWS_TMA)
    delta: gl.base_value

    @gluon.constexpr_function
    def __init__(self, q, do, k, v, lse, delta):
        self.q = q
        self.do = do
        self.k = k
        self.v = v
        self.lse = lse
        self.delta = delta


@aggregate
class Grads:
    """Where the gradients go (contiguous: dK, dV (B, H_kv, N, d) in the inputs' dtype; dQ
    (B, H, N, d) float32, added to, with DQ_ATOMIC), the scales, and with DQ_ORDERED the counters
    that order the additions into dQ (`gluon_bwd_order.turn`; otherwise any pointer, unused)."""

    dk: gl.tensor
    dv: gl.tensor
    dq: gl.tensor
    qk_scale: gl.tensor  # sm_scale · log2 e
    sm_scale: gl.tensor
    locks: gl.tensor

    @gluon.constexpr_function
    def __init__(self, dk, dv, dq, qk_scale, sm_scale, locks):
        self.dk = dk
        self.dv = dv
        self.dq = dq
        self.qk_scale = qk_scale
        self.sm_scale = sm_scale
        self.locks = locks
