"""A TMA reduction for Gluon on Hopper: a tile in shared memory added into global memory by the
bulk tensor copy engine (`cp.reduce.async.bulk.tensor`), as FlashAttention-3 reduces its fp32 dQ
tiles into `dQaccum`.

Triton 3.6's Gluon has the operation (`ttng.async_tma_reduce`, which `tl`'s tensor descriptors'
`atomic_add` lowers to) but its Hopper `tma` module exposes only the plain copies. This is the
missing builtin, written as that module writes `async_copy_shared_to_global`:

    src.store(tile)
    fence_async_shared()
    async_reduce_shared_to_global(desc, [row, col], src)   # global[box at row, col] += src
    tma.store_wait(0)                                      # before `src` is written again

Like the store, it is issued by the whole warpgroup and the hardware does one copy; additions of
different programs into one box are atomic element by element, their order unspecified (so a sum
of floats in them is not bit-for-bit reproducible).
"""

from triton._C.libtriton import ir
from triton.experimental.gluon.language._core import _unwrap_if_constexpr, builtin

KINDS = {"add": ir.DESCRIPTOR_REDUCE_KIND.ADD, "min": ir.DESCRIPTOR_REDUCE_KIND.MIN,
         "max": ir.DESCRIPTOR_REDUCE_KIND.MAX}


@builtin
def async_reduce_shared_to_global(tensor_desc, coord, src, kind="add", _semantic=None):
    """global[the box of `tensor_desc` at `coord`] (op)= the shared-memory tile `src`; op: `kind`,
    one of KINDS. Asynchronous: `tma.store_wait` before `src` is written again."""
    kind = _unwrap_if_constexpr(kind)
    if kind not in KINDS:
        raise ValueError(f"TMA reduction kind {kind!r}; accepted: {', '.join(KINDS)}")
    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(KINDS[kind], tensor_desc.handle, coord, src.handle)
