"""Which implementations a run knows by name, and where each runs: the one place that says so.

`BUILTINS` holds the contenders that come with the project (their functions: `builtin`), each a
`Contender` like a user's: the kernel first (`triton`), then `triton_tl`, `naive`, SDPA's backends,
`flex`, `flash_attn` (FlashAttention-2) and `fa4` (FlashAttention-4).

`runs_at(contender, where, direction)` answers, for every stage, whether an implementation runs
at a point in a pass, and if not why: what it supports (`Contender.skip_reason`: devices, dtypes,
head dims, causal, grouped heads, bf16 under the interpreter), whether it is installed here
(`unavailable`), whether it has that pass (`backward`), and the timing grids it is timed on. The
GPU stages (`minimodel.gpu.implementations`) ask it, for the kernel as for every contender.

Importing this module imports no torch: the workflow's process reads the names before any job.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from minimodel.contenders.spec import Contender
from minimodel.floor import contract as C

# FA4's forward: Hopper (sm90) and Blackwell (sm100, sm103) chips
FA4_COMPUTE_CAPABILITIES = (9, 10)


def _builtin(name, backward=True, **supports):
    return Contender(name, f"minimodel.contenders.builtin:{name}", gqa=True, backward=backward, **supports)


# each named as minimodel.floor.contract names it; `minimodel.contenders.builtin` holds a function
# of the same name for each
BUILTINS = {
    C.TRITON: _builtin(C.TRITON, triton=True),
    C.TRITON_TL: _builtin(C.TRITON_TL, backward=False, triton=True),
    C.NAIVE: _builtin(C.NAIVE),
    **{name: _builtin(name, devices=("cuda",)) for name in C.SDPA_BACKENDS},
    C.FLEX: _builtin(C.FLEX, devices=("cuda",)),
    C.FLASH_ATTN: _builtin(C.FLASH_ATTN, devices=("cuda",), head_dims=(64, 128, 256)),
    C.FA4: _builtin(C.FA4, devices=("cuda",)),
}


@dataclass(frozen=True)
class Where:
    """A point as a stage asks whether an implementation runs there: the head dim, causal or not,
    the dtype and device of its inputs, K and V with fewer heads than Q (`grouped`), the kernel
    under Triton's interpreter (`interpreted`), and the timing grid it belongs to (None: a stage
    without grids)."""

    d: int
    causal: bool
    dtype: str = "float16"
    device: str = "cuda"
    grouped: bool = False
    interpreted: bool = False
    grid: str | None = None

    @property
    def where(self) -> Where:
        return self


def runs_at(contender: Contender, where: Where, direction: str) -> str | None:
    """None when `contender` runs at `where` in `direction`, else why not (module docstring)."""
    reason = _no_backward(contender) if direction != C.FORWARD else None
    reason = reason or unavailable(contender.name) or contender.skip_reason(
        where.device, where.dtype, where.d, where.causal, where.grouped, where.interpreted)
    if not reason and where.grid is not None and where.grid not in contender.grids:
        reason = f"{contender.name} is timed on the {', '.join(contender.grids)} grid only"
    return reason


def _no_backward(contender: Contender) -> str | None:
    if contender.name == C.TRITON_TL:
        return (f"{C.TRITON_TL} has no backward: it is the kernel's tl forward alone (the "
                f"kernel's backward is {C.TRITON}'s, minimodel.kernel.attention)")
    return contender.no_backward_reason()


def unavailable(name: str) -> str | None:
    """Why a built-in cannot run on this machine at all, or None."""
    if name == C.FLASH_ATTN:
        return _fa2_unavailable()
    if name == C.FA4:
        return _fa4_unavailable()
    return None


def _fa2_unavailable() -> str | None:
    # FlashAttention-4 installs `flash_attn` as a namespace holding only `flash_attn.cute`: FA2 is
    # there only when `flash_attn.flash_attn_func` imports
    spec = importlib.util.find_spec("flash_attn")
    if spec is None or spec.origin is None:
        return "the flash_attn package (FlashAttention-2) is not installed"
    try:
        from flash_attn import flash_attn_func  # noqa: F401 (optional: whether it imports is the answer)
    except ImportError as err:
        return f"the flash_attn package (FlashAttention-2) does not import: {err}"
    return None


def _fa4_unavailable() -> str | None:
    try:
        spec = importlib.util.find_spec("flash_attn.cute")
    except ImportError:  # a flash_attn package that fails to import
        spec = None
    if spec is None:
        return "FlashAttention-4 (flash_attn.cute, pip install flash-attn-4) is not installed"
    import torch  # not at the top: the workflow's process, which reads BUILTINS, imports no torch

    if not torch.cuda.is_available():
        return None  # the contender's devices say why it does not run here
    major, minor = torch.cuda.get_device_capability()
    if major not in FA4_COMPUTE_CAPABILITIES:
        return (f"FlashAttention-4's forward runs on compute capability "
                f"{' and '.join(f'{c}.x' for c in FA4_COMPUTE_CAPABILITIES)}, not {major}.{minor}")
    return None
