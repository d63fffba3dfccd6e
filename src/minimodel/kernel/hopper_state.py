"""What the partitions of the Gluon forward for Hopper (`hopper`) share, as aggregates (Triton's
`_aggregate`), each passed to a partition as one argument: the constexpr shapes and layouts
(`Tiles`), the shared memory and the barriers between the partitions, allocated in one place
(`Channels`), one program's query tile and outputs (`QueryTile`) and what the producer reads
(`Inputs`). `fields` makes an aggregate whose constructor takes its fields in order.
"""

# no `from __future__ import annotations`: an aggregate checks its fields against their annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma
from triton.language.core import _aggregate as aggregate


def fields(cls):
    """`aggregate(cls)` with a constructor that takes its fields, in the order `cls` annotates them."""
    names = tuple(cls.__annotations__)

    def __init__(self, *values):
        for name, value in zip(names, values, strict=True):
            setattr(self, name, value)
    cls.__init__ = gluon.constexpr_function(__init__)
    return aggregate(cls)


@aggregate
class Tiles:
    """One program's shapes and layouts, all constexpr; the register layouts are one consumer
    warpgroup's (4 warps)."""

    BLOCK_M: gl.constexpr  # query rows per consumer
    BLOCK_N: gl.constexpr  # keys per tile
    BLOCK_Q: gl.constexpr  # query rows per program: BLOCK_M · CONSUMERS
    HEAD_DIM: gl.constexpr
    CONSUMERS: gl.constexpr
    STAGES: gl.constexpr  # K/V buffers
    IS_CAUSAL: gl.constexpr
    PINGPONG: gl.constexpr
    STORE_LSE: gl.constexpr
    dtype: gl.constexpr
    s_layout: gl.constexpr  # S, P in fp32: [BLOCK_M, BLOCK_N]
    o_layout: gl.constexpr  # the O accumulator: [BLOCK_M, HEAD_DIM]
    p_layout: gl.constexpr  # P as the left operand of PV, from registers
    q_smem: gl.constexpr
    kv_smem: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, BLOCK_M, BLOCK_N, HEAD_DIM, CONSUMERS, STAGES, IS_CAUSAL, PINGPONG, STORE_LSE, dtype):
        self.BLOCK_M = gl.constexpr(BLOCK_M)
        self.BLOCK_N = gl.constexpr(BLOCK_N)
        self.BLOCK_Q = gl.constexpr(BLOCK_M * CONSUMERS)
        self.HEAD_DIM = gl.constexpr(HEAD_DIM)
        self.CONSUMERS = gl.constexpr(CONSUMERS)
        self.STAGES = gl.constexpr(STAGES)
        self.IS_CAUSAL = gl.constexpr(IS_CAUSAL)
        self.PINGPONG = gl.constexpr(PINGPONG)
        self.STORE_LSE = gl.constexpr(STORE_LSE)
        self.dtype = gl.constexpr(dtype)
        o_layout = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                             instr_shape=[16, HEAD_DIM, 16])
        self.s_layout = gl.constexpr(gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                               instr_shape=[16, BLOCK_N, 16]))
        self.o_layout = gl.constexpr(o_layout)
        self.p_layout = gl.constexpr(gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2))
        self.q_smem = gl.constexpr(gl.NVMMASharedLayout.get_default_for([BLOCK_M, HEAD_DIM], dtype))
        self.kv_smem = gl.constexpr(gl.NVMMASharedLayout.get_default_for([BLOCK_N, HEAD_DIM], dtype))


@fields
class Channels:
    """The shared memory and the barriers between the partitions, allocated in one place
    (`create`). Who arrives and who waits:
    - q_ready: the producer's TMA completes it when Q has landed; every consumer waits once;
    - k_ready[s], v_ready[s]: TMA completes them when stage s holds K (V) of a key tile; the
      consumers wait on them;
    - k_empty[s], v_empty[s] (count CONSUMERS): each consumer arrives when its QKᵀ (PV) of stage s
      has completed; the producer waits on them before reusing the stage's K (V) buffer;
    - turns[i]: consumer i − 1 (cyclically) arrives after issuing its GEMMs; consumer i waits on
      it before issuing its own (PINGPONG)."""

    q: gl.shared_memory_descriptor  # [CONSUMERS, BLOCK_M, HEAD_DIM]
    k: gl.shared_memory_descriptor  # [STAGES, BLOCK_N, HEAD_DIM]
    v: gl.shared_memory_descriptor
    q_ready: gl.shared_memory_descriptor
    k_ready: gl.shared_memory_descriptor
    v_ready: gl.shared_memory_descriptor
    k_empty: gl.shared_memory_descriptor
    v_empty: gl.shared_memory_descriptor
    turns: gl.shared_memory_descriptor

    @gluon.jit
    def create(T):
        bar: gl.constexpr = mbarrier.MBarrierLayout()
        q = gl.allocate_shared_memory(T.dtype, [T.CONSUMERS, T.BLOCK_M, T.HEAD_DIM], T.q_smem)
        k = gl.allocate_shared_memory(T.dtype, [T.STAGES, T.BLOCK_N, T.HEAD_DIM], T.kv_smem)
        v = gl.allocate_shared_memory(T.dtype, [T.STAGES, T.BLOCK_N, T.HEAD_DIM], T.kv_smem)
        q_ready = gl.allocate_shared_memory(gl.int64, [1], bar)
        k_ready = gl.allocate_shared_memory(gl.int64, [T.STAGES, 1], bar)
        v_ready = gl.allocate_shared_memory(gl.int64, [T.STAGES, 1], bar)
        k_empty = gl.allocate_shared_memory(gl.int64, [T.STAGES, 1], bar)
        v_empty = gl.allocate_shared_memory(gl.int64, [T.STAGES, 1], bar)
        turns = gl.allocate_shared_memory(gl.int64, [T.CONSUMERS, 1], bar)
        mbarrier.init(q_ready, count=1)
        for i in gl.static_range(T.STAGES):
            mbarrier.init(k_ready.index(i), count=1)
            mbarrier.init(v_ready.index(i), count=1)
            mbarrier.init(k_empty.index(i), count=T.CONSUMERS)
            mbarrier.init(v_empty.index(i), count=T.CONSUMERS)
        for i in gl.static_range(T.CONSUMERS):
            mbarrier.init(turns.index(i), count=1)
        return Channels(q, k, v, q_ready, k_ready, v_ready, k_empty, v_empty, turns)


@fields
class QueryTile:
    """One program's work: the query tile pid_m of one (batch, head), and where its outputs go."""

    o_desc: tma.tensor_descriptor
    lse_ptr: gl.tensor
    b: gl.tensor
    h: gl.tensor
    pid_m: gl.tensor
    pid_bh: gl.tensor
    N: gl.tensor
    qk_scale: gl.tensor


@fields
class Inputs:
    """What the producer reads: Q, K, V's descriptors and the K/V head of the program."""

    q: tma.tensor_descriptor
    k: tma.tensor_descriptor
    v: tma.tensor_descriptor
    h_kv: gl.tensor
