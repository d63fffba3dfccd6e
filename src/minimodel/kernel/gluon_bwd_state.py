"""What the partitions of the warp-specialized Gluon backward (`gluon_bwd_ws`) share, as aggregates
(as `hopper_state`'s): shapes and layouts (`Config`), one program's key block (`KeyBlock`), the
shared memory and barriers (`Ring`), the producer's inputs (`Descriptors`), where the gradients go
(`Grads`); and the TMA reduction into global memory (`async_reduce_shared_to_global`), which Triton
3.6 has (`ttng.async_tma_reduce`) but Gluon does not expose for Hopper.
"""

# no `from __future__ import annotations`: an aggregate checks its fields against their annotations

from triton._C.libtriton import ir
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import _unwrap_if_constexpr, builtin
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma
from triton.language.core import _aggregate as aggregate

from minimodel.kernel.hopper_state import fields

# LSE and D in shared memory (a stage is [BLOCK_M] of them), as the producer's plain stores write them
ROW_LAYOUT = gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[0])
REDUCE_KINDS = {"add": ir.DESCRIPTOR_REDUCE_KIND.ADD, "min": ir.DESCRIPTOR_REDUCE_KIND.MIN,
                "max": ir.DESCRIPTOR_REDUCE_KIND.MAX}


@builtin
def async_reduce_shared_to_global(tensor_desc, coord, src, kind="add", _semantic=None):
    """global[the box of `tensor_desc` at `coord`] (op)= the shared tile `src` by the bulk tensor copy
    engine (`cp.reduce.async.bulk.tensor`, as FlashAttention-3 reduces dQ); op: `kind` of REDUCE_KINDS.
    As `tma.async_copy_shared_to_global`: one copy, asynchronous (`tma.store_wait` before `src` is
    written again). Programs' additions into one box are atomic per element, in no fixed order."""
    kind = _unwrap_if_constexpr(kind)
    if kind not in REDUCE_KINDS:
        raise ValueError(f"TMA reduction kind {kind!r}; accepted: {', '.join(REDUCE_KINDS)}")
    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(REDUCE_KINDS[kind], tensor_desc.handle, coord, src.handle)


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
    DQ_IN_KERNEL: gl.constexpr  # dQ added into a float32 dQ by TMA reductions (`gluon_bwd_ws._dq_reduce`)
    DQ_ROWS: gl.constexpr  # dQ split between the warpgroups by rows (else by head-dim columns)
    SMEM_OPERANDS: gl.constexpr  # Pᵀ and dSᵀ to dV's and dK's GEMMs through shared memory
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
    row_layout: gl.constexpr  # LSE, D in the producer's registers: a value per thread

    @gluon.constexpr_function
    def __init__(self, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, IS_CAUSAL, DQ_IN_KERNEL, dtype):
        self.BLOCK_M = gl.constexpr(BLOCK_M)
        self.BLOCK_N = gl.constexpr(BLOCK_N)
        self.WG_KEYS = gl.constexpr(BLOCK_N // 2)
        self.HEAD_DIM = gl.constexpr(HEAD_DIM)
        self.STAGES = gl.constexpr(STAGES)
        self.IS_CAUSAL = gl.constexpr(IS_CAUSAL)
        self.DQ_IN_KERNEL = gl.constexpr(DQ_IN_KERNEL)
        # a warpgroup MMA has 64 rows: split the rows only where each half has 64
        self.DQ_ROWS = gl.constexpr(BLOCK_M >= 128)
        # with dQ in the kernel at 128 query rows, Pᵀ's and dSᵀ's register operands would spill
        self.SMEM_OPERANDS = gl.constexpr(bool(DQ_IN_KERNEL) and BLOCK_M >= 128)
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
        self.row_layout = gl.constexpr(gl.BlockedLayout([1], [32], [4], [0]))  # the producer's warpgroup


@fields
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

    @gluon.jit
    def create(H, N, GROUP, C):
        """This program's block: key tile fastest (causal: the first, with the most query tiles,
        start first), every program on the grid's x axis."""
        num_n = gl.cdiv(N, C.BLOCK_N)
        pid = gl.program_id(0)
        pid_n = pid % num_n
        pid_bkv = pid // num_n
        H_kv = H // GROUP
        start_n = pid_n * C.BLOCK_N
        if C.IS_CAUSAL:
            first = start_n // C.BLOCK_M  # BLOCK_N is a multiple of BLOCK_M
            band_end = start_n + C.BLOCK_N
        else:
            first = start_n * 0
            band_end = start_n * 0
        tiles = gl.cdiv(N, C.BLOCK_M) - first
        return KeyBlock(pid_bkv // H_kv, pid_bkv % H_kv, start_n, first, tiles, band_end, H, N, GROUP)

    @gluon.jit
    def query(self, t, C):
        """(query head, first query row) of step t."""
        g = t // self.tiles
        return self.h_kv * self.GROUP + g, (self.first + t - g * self.tiles) * C.BLOCK_M


@fields
class Ring:
    """The shared memory and the barriers that connect the partitions, allocated in one place
    (`create`). Who arrives and who waits:
    - kv_ready: TMA completes it when K and V have landed (the producer expects their bytes);
      each MMA warpgroup waits once.
    - ready[s] (count 2): stage s holds Q, dO, LSE and D of a step. The producer arrives twice:
      once with Q's and dO's bytes expected (TMA completes those), once after its warpgroup has
      stored LSE and D there; the MMA warpgroups wait on it, once per pass over the ring.
    - empty[s] (count 2): each MMA warpgroup arrives when its GEMMs of the step in stage s are
      done; the producer waits on it before loading stage s again.
    - ds_ready[i] (count 2, DQ_IN_KERNEL): each MMA warpgroup arrives when its dSᵀ rows of a step
      are in ds[i] (i = step % 2); both wait on it before dQ = dS K reads both halves. Two buffers:
      a warpgroup writes ds[i] again only after passing step + 1's wait, so after the other one's
      dQ GEMM of this step has completed.
    And dq[w] (DQ_IN_KERNEL): MMA warpgroup w's float32 share of a step's dQ, which the TMA engine
    reads to add it into global memory; w waits for that read (`tma.store_wait`) before writing it
    again."""

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

    @gluon.jit
    def create(C):
        bar: gl.constexpr = mbarrier.MBarrierLayout()
        k = gl.allocate_shared_memory(C.dtype, [C.BLOCK_N, C.HEAD_DIM], C.kv_smem)
        v = gl.allocate_shared_memory(C.dtype, [C.BLOCK_N, C.HEAD_DIM], C.kv_smem)
        q = gl.allocate_shared_memory(C.dtype, [C.STAGES, C.BLOCK_M, C.HEAD_DIM], C.q_smem)
        do = gl.allocate_shared_memory(C.dtype, [C.STAGES, C.BLOCK_M, C.HEAD_DIM], C.q_smem)
        lse = gl.allocate_shared_memory(gl.float32, [C.STAGES, C.BLOCK_M], ROW_LAYOUT)
        delta = gl.allocate_shared_memory(gl.float32, [C.STAGES, C.BLOCK_M], ROW_LAYOUT)
        # without DQ_IN_KERNEL nothing uses ds and dq and the compiler drops them (a field must hold a value)
        ds = gl.allocate_shared_memory(C.dtype, [2, C.BLOCK_N, C.BLOCK_M], C.ds_smem)
        dq = gl.allocate_shared_memory(gl.float32, [2, C.DQ_M, C.DQ_N], C.dq_smem)
        kv_ready = gl.allocate_shared_memory(gl.int64, [1], bar)
        ready = gl.allocate_shared_memory(gl.int64, [C.STAGES, 1], bar)
        empty = gl.allocate_shared_memory(gl.int64, [C.STAGES, 1], bar)
        ds_ready = gl.allocate_shared_memory(gl.int64, [2, 1], bar)
        mbarrier.init(kv_ready, count=1)
        for s in gl.static_range(C.STAGES):
            mbarrier.init(ready.index(s), count=2)
            mbarrier.init(empty.index(s), count=2)
        for i in gl.static_range(2):
            mbarrier.init(ds_ready.index(i), count=2)
        return Ring(k, v, q, do, lse, delta, ds, dq, kv_ready, ready, empty, ds_ready)


@fields
class Descriptors:
    """What the producer reads: TMA descriptors of Q, dO, K, V, 4-D (B, H, N, d); LSE and D,
    contiguous float32 (B, H, N), as pointers."""

    q: tma.tensor_descriptor
    do: tma.tensor_descriptor
    k: tma.tensor_descriptor
    v: tma.tensor_descriptor
    lse: gl.tensor
    delta: gl.tensor


@fields
class Grads:
    """Where dK and dV go (contiguous (B, H_kv, N, d), the inputs' dtype), and the scales."""

    dk: gl.tensor
    dv: gl.tensor
    qk_scale: gl.tensor  # sm_scale · log2 e
    sm_scale: gl.tensor
