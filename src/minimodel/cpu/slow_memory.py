"""The instrumented count of slow-memory traffic (notes/labs.md, lab 01 C): the inputs are wrapped
as `SlowMemoryTensor`s, a tensor subclass whose `__torch_dispatch__` sees every aten op that touches
slow memory and adds up the bytes it reads and writes in a `ByteCounter`.

A result made from slow-memory data stays in slow memory when its storage is larger than an
on-chip budget (theory 02's 64 KiB of SRAM); a smaller one is on chip, a plain tensor whose ops
are free. So the naive S and P count, and the flash tile intermediates do not. View ops (slices,
transposes) move nothing; `copy_` writes its destination without reading it; `addmm`/`baddbmm`
with beta=0 read no input matrix (BLAS semantics); `empty` allocates without writing.
`count_bytes` runs one function so; `minimodel.cpu.bytecount` measures the references with it.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable, Iterable

import torch

# Theory 02's on-chip SRAM: the default budget under which a tensor counts as on chip
# (the workflow passes `cpu.sram_bytes`, whose default is the same).
THEORY_SRAM_BYTES = 64 * 1024
aten = torch.ops.aten

_FREE_OPS = {aten.empty.memory_format, aten.empty_strided.default, aten.empty_like.default}
_BETA_OPS = {aten.addmm.default, aten.baddbmm.default}


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [t for t in value if isinstance(t, torch.Tensor)]
    return []


def _storage_key(t: torch.Tensor) -> int:
    """The storage's own address: shared by views, distinct among live storages, and defined on
    the meta device too, where every data pointer is 0."""
    return t.untyped_storage()._cdata


@functools.cache
def _plan(func) -> tuple | None:
    """Per op: None when it moves nothing, else (name, [(position, name, written, read)])."""
    if func in _FREE_OPS:
        return None
    plan = []
    for i, arg in enumerate(func._schema.arguments):
        written = arg.alias_info is not None and arg.alias_info.is_write
        # copy_ and out= arguments are overwritten whole, never read
        read = not (written and (func is aten.copy_.default or arg.kwarg_only))
        plan.append((i, arg.name, written, read))
    return str(func.overloadpacket.__name__), plan


class ByteCounter:
    """Totals of slow-memory bytes read and written, filled in by `SlowMemoryTensor` ops.

    `sram_bytes`: a tensor made from slow-memory data whose storage fits in this many bytes is
    on chip (a plain tensor, free to use); a larger one stays in slow memory.
    `per_op` maps an aten op's name to [calls, bytes read, bytes written].
    """

    def __init__(self, sram_bytes: int = THEORY_SRAM_BYTES):
        if sram_bytes < 0:
            raise ValueError(f"sram_bytes must be >= 0, got {sram_bytes}")
        self.sram_bytes = sram_bytes
        self.reads = 0
        self.writes = 0
        self.per_op: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        self._writes_by_storage: dict[int, int] = defaultdict(int)

    @property
    def total(self) -> int:
        return self.reads + self.writes

    def writes_to(self, t: torch.Tensor) -> int:
        """Bytes written into slow memory for the storage of `t`; 0 for an on-chip (plain) tensor.

        Storages are told apart by address, and the allocator hands a freed address to the next
        allocation: each slow-memory allocation starts its storage's count afresh (`place` in
        `__torch_dispatch__`), and a plain tensor never looks its address up.
        """
        if not isinstance(t, SlowMemoryTensor):
            return 0
        return self._writes_by_storage.get(_storage_key(t.elem), 0)

    def wrap(self, t: torch.Tensor) -> SlowMemoryTensor:
        """Place an existing tensor in slow memory, whatever its size (the inputs Q, K, V)."""
        return SlowMemoryTensor(t, self)

    def record(self, name: str, reads: int, writes: int) -> None:
        self.reads += reads
        self.writes += writes
        entry = self.per_op[name]
        entry[0] += 1
        entry[1] += reads
        entry[2] += writes


def unwrap(t):
    """The plain tensor a `SlowMemoryTensor` holds (any other value as it is)."""
    return t.elem if isinstance(t, SlowMemoryTensor) else t


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class SlowMemoryTensor(torch.Tensor):
    """A tensor that lives in slow memory; every aten op on it is counted by its `ByteCounter`.

    Ops on plain (on-chip) tensors run at native speed and are free. An op that touches a
    slow-memory tensor reads the bytes of its slow inputs (the view's elements, not the whole
    storage) and writes the bytes of its slow outputs; a new result larger than the budget
    stays in slow memory, a smaller one comes back as a plain tensor (it was made on chip).
    """

    elem: torch.Tensor
    counter: ByteCounter

    @staticmethod
    def __new__(cls, elem: torch.Tensor, counter: ByteCounter):
        r = torch.Tensor._make_wrapper_subclass(
            cls, elem.shape, strides=elem.stride(), storage_offset=elem.storage_offset(),
            dtype=elem.dtype, device=elem.device, requires_grad=False,
        )
        r.elem = elem
        r.counter = counter
        return r

    def __repr__(self):
        return f"SlowMemoryTensor({self.elem!r})"

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        counter = next(t.counter for t in _tensors(list(args) + list(kwargs.values()))
                       if isinstance(t, SlowMemoryTensor))
        flat_args = [_unwrap_tree(a) for a in args]
        flat_kwargs = {k: _unwrap_tree(v) for k, v in kwargs.items()}
        out = func(*flat_args, **flat_kwargs)
        plan = _plan(func)
        if func.is_view:
            # an alias of slow memory is slow memory; reading it happens in the op that uses it
            counter.record(str(func.overloadpacket.__name__), 0, 0)
            return _map_out(out, lambda t: SlowMemoryTensor(t, counter))
        reads = writes = 0
        written = []
        if plan is not None:
            name, arguments = plan
            for i, arg_name, is_written, is_read in arguments:
                value = args[i] if i < len(args) else kwargs.get(arg_name)
                tensors = _tensors(value)
                if is_written:
                    written += tensors
                if is_read and not (func in _BETA_OPS and arg_name == "self"
                                    and _beta(args, kwargs) == 0):
                    reads += sum(_nbytes(t) for t in tensors if isinstance(t, SlowMemoryTensor))
        for t in written:
            if isinstance(t, SlowMemoryTensor):
                writes += _nbytes(t)
                counter._writes_by_storage[_storage_key(t.elem)] += _nbytes(t)
        if written and func._schema.returns and func._schema.returns[0].alias_info is not None:
            result = written[0]  # in-place or out=: return the caller's own tensor
        else:
            def place(t):
                nonlocal writes
                # memory allocated like a slow tensor (empty_like) is allocated where it lives
                if plan is not None and t.untyped_storage().nbytes() <= counter.sram_bytes:
                    return t
                if plan is not None:
                    writes += _nbytes(t)
                    # a new allocation: whatever an earlier storage at this address got is not its
                    counter._writes_by_storage[_storage_key(t)] = _nbytes(t)
                return SlowMemoryTensor(t, counter)
            result = _map_out(out, place)
        counter.record(str(func.overloadpacket.__name__), reads, writes)
        return result


def _unwrap_tree(value):
    if isinstance(value, list | tuple):
        return type(value)(unwrap(v) for v in value)
    return unwrap(value)


def _map_out(out, fn):
    if isinstance(out, torch.Tensor):
        return fn(out)
    if isinstance(out, list | tuple):
        return type(out)(fn(t) if isinstance(t, torch.Tensor) else t for t in out)
    return out


def count_bytes(fn: Callable[..., torch.Tensor], inputs: Iterable[torch.Tensor],
                sram_bytes: int = THEORY_SRAM_BYTES) -> dict:
    """Call `fn(*inputs)` with the inputs in slow memory; the write of its output is split off."""
    counter = ByteCounter(sram_bytes)
    result = fn(*(counter.wrap(t) for t in inputs))
    o_write = counter.writes_to(result)
    return {
        "reads": counter.reads,
        "writes": counter.writes - o_write,
        "o_write": o_write,
        "bytes": counter.total - o_write,
        "per_op": {k: tuple(v) for k, v in counter.per_op.items()},
        "result": unwrap(result),
    }


def _beta(args, kwargs):
    return args[3] if len(args) > 3 else kwargs.get("beta", 1)
