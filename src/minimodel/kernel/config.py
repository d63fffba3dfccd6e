"""The kernel's tile configurations, and the policy that picks one per problem and architecture.

`get_fwd_config` is the policy: on Hopper (compute capability 9.0, the H100 and H200) the table
tuned on the H200 (notes/kernel.md), through TMA; elsewhere `portable_config`, pointer loads with
tiles that fit every architecture's shared memory without spilling.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass

import torch
import triton


@dataclass(frozen=True)
class FwdConfig:
    """Tile sizes and launch parameters of one kernel specialization.

    TMA: load tiles through Hopper's tensor-memory accelerator (host-side tensor descriptors)
    instead of per-thread pointer loads; needs compute capability >= 9 and 16-byte aligned strides.
    WARP_SPECIALIZE: let Triton split the unmasked key loop into producer and consumer warps.
    MAXNREG: cap on registers per thread (None: the compiler's choice); a cap lets more programs
    share a multiprocessor, e.g. two 8-warp programs at 128 registers.
    GLUON: run the Gluon kernel for Hopper (`minimodel.kernel.hopper`) instead of the tl kernel:
    a producer warp and CONSUMERS warpgroups, each owning BLOCK_M // CONSUMERS query rows, with
    num_stages K/V buffers; PINGPONG makes the consumers take turns on the tensor cores.
    """

    BLOCK_M: int
    BLOCK_N: int
    num_warps: int
    num_stages: int
    TMA: bool = False
    WARP_SPECIALIZE: bool = False
    MAXNREG: int | None = None
    GLUON: bool = False
    CONSUMERS: int = 1
    PINGPONG: bool = False

    @property
    def path(self) -> str:
        """Which kernel runs: "gluon" (Hopper only) or "tl" (every device, and the interpreter)."""
        return "gluon" if self.GLUON else "tl"

    def as_dict(self) -> dict:
        return asdict(self)


@functools.cache
def sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


HOPPER = 90  # compute capability 9.0 (H100, H200): TMA, and the table tuned on the H200
# Shared memory one program may use, by compute capability (bytes, the opt-in maximum).
SHARED_MEMORY = {80: 166912, 86: 101376, 89: 101376, 90: 232448}


@functools.cache
def _arch(device_index: int) -> int:
    major, minor = torch.cuda.get_device_capability(device_index)
    return 10 * major + minor


def device_arch(device: torch.device) -> int:
    """Compute capability of a CUDA device as major·10 + minor (90 for the H200), read once."""
    return _arch(device.index or 0)


@functools.cache
def _sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def device_sms(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device (132 on the H200), read once."""
    return _sms(device.index or 0)


def portable_config(head_dim: int) -> FwdConfig:
    """Pointer loads with tiles that fit every architecture's shared memory without spilling.

    For GPUs other than Hopper (A100, L40S, ...), and for Hopper inputs that TMA cannot read.
    Chosen by cross-compiling for sm_80, sm_89 and sm_90 (tests/test_kernel_report.py checks
    registers, spills and shared memory); not timed on those GPUs, none could be lent.
    """
    if head_dim <= 64:
        return FwdConfig(64, 64, 4, 3)
    if head_dim <= 128:
        return FwdConfig(64, 64, 4, 2)
    return FwdConfig(64, 32, 8, 2)


# Head dims the Gluon kernel (minimodel.kernel.hopper) is built and checked for.
GLUON_HEAD_DIMS = (64, 128)


def gluon_config(head_dim: int, causal: bool) -> FwdConfig:
    """The Gluon kernel's configuration on Hopper: two consumer warpgroups of 64 query rows each,
    128-key tiles, two K/V stages, taking turns on the tensor cores (notes/kernel.md)."""
    return FwdConfig(128, 128, 4, 2, TMA=True, GLUON=True, CONSUMERS=2, PINGPONG=True)


def get_fwd_config(head_dim: int, causal: bool, device_type: str, n: int | None = None,
                   batch_heads: int | None = None, sm_count: int | None = None,
                   arch: int = HOPPER) -> FwdConfig:
    """The configuration for a head dim, causality and problem size on a device.

    On Hopper at d = 128, past the launch-bound sizes, the Gluon kernel (`gluon_config`): it
    overlaps softmax and tensor cores where the tl kernel cannot. At d = 64 the tl kernel's two
    8-warp programs per multiprocessor still win on the H200, so d = 64 stays on it, as does
    everything else, the interpreter included (`tl_config`). `launch_config` falls back to the
    tl kernel's choice where the inputs are ones the Gluon kernel cannot read.
    """
    cfg = tl_config(head_dim, causal, device_type, n, batch_heads, sm_count, arch)
    if device_type == "cuda" and arch == HOPPER and head_dim == 128 and cfg.TMA:
        return gluon_config(head_dim, causal)
    return cfg


def tl_config(head_dim: int, causal: bool, device_type: str, n: int | None = None,
                   batch_heads: int | None = None, sm_count: int | None = None,
                   arch: int = HOPPER) -> FwdConfig:
    """The tl kernel's tile configuration for a head dim, causality and problem size on a device.

    On Hopper (`arch` 90): the winners of the H200 search in notes/kernel.md, through TMA.
    When causal 128-row query tiles would give fewer than two programs per multiprocessor (the
    lab grid's B·H = 8), 64-row tiles double the programs and balance rows of unequal length.
    Small problems take `portable_config`: they are launch-bound, a TMA descriptor costs host
    time at every launch, and small tiles give more programs. On any other architecture:
    `portable_config`, with no tuning for one GPU carried over to another.
    BLOCK_M is a multiple of BLOCK_N, so the causal diagonal of a query tile falls in whole
    key tiles. The interpreter runs one program at a time in numpy, where larger tiles mean
    fewer programs; it takes the lab's 64 × 64 everywhere.
    """
    if device_type != "cuda":
        return FwdConfig(64, 64, 4, 1)
    if arch != HOPPER or head_dim > 128:
        return portable_config(head_dim)
    # below ~1 GFLOP-worth of B·H·N²·d a call is launch-bound: skip the TMA descriptors' host cost
    if n is not None and batch_heads is not None and batch_heads * n * n * head_dim <= 2**30:
        return portable_config(head_dim)
    if causal and n is not None and batch_heads is not None and sm_count is not None:
        if batch_heads * triton.cdiv(n, 128) < 2 * sm_count:
            return FwdConfig(64, 64, 4, 3, TMA=True)
    if causal and n is not None and n <= 1024:
        # short causal rows: small tiles give more programs to share out rows of unequal length
        # (faster at both head dims on the H200: notes/kernel.md)
        return FwdConfig(64, 64, 4, 3, TMA=True)
    if head_dim == 64:
        # capped at 128 registers, two 8-warp programs share a multiprocessor, and one's matmuls
        # overlap the other's softmax; uncapped, one program fills the register file
        # (notes/kernel.md has the timings)
        return FwdConfig(128, 128, 8, 2, TMA=True, MAXNREG=128)
    if head_dim < 64:
        return FwdConfig(128, 128, 4, 3, TMA=True)
    # the fastest shape that does not spill: 128 x 64 with 4 warps spills at d = 128, and with
    # 8 warps, which does not, it is slower (notes/kernel.md)
    return FwdConfig(128, 128, 8, 3, TMA=True)
