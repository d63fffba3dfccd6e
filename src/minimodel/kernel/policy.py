"""The policy: which configuration (`config.FwdConfig`, `config.BwdConfig`) a problem gets on an
architecture. On Hopper (compute capability 9.0, the H100 and H200) the tables tuned on the H200
(notes/kernel.md, notes/backward.md); elsewhere tiles that fit every architecture's shared memory;
under the interpreter, the lab's small tiles. Pure functions of their arguments, except
`device_arch` and `device_sms`, which read a device once.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import NamedTuple

import torch
import triton

from minimodel.kernel.config import GLUON_DQ_TILES, WS_KEYS, WS_WARPS, BwdConfig, FwdConfig
from minimodel.kernel.inputs import INTERPRETED

HOPPER = 90  # compute capability 9.0 (H100, H200): TMA, and the tables tuned on the H200
# Shared memory one program may use, by compute capability (bytes, the opt-in maximum).
SHARED_MEMORY = {80: 166912, 86: 101376, 89: 101376, 90: 232448}
GLUON_HEAD_DIMS = (128,)  # the Gluon forward's: at d = 64 the tl kernel's two 8-warp programs win
GLUON_BWD_HEAD_DIMS = (64, 128)  # the Gluon backward's (dK/dV and the dQ pass)


@functools.cache
def _properties(device_index: int):
    return torch.cuda.get_device_properties(device_index)


def device_arch(device: torch.device) -> int:
    """Compute capability of a CUDA device as major·10 + minor (90 for the H200), read once."""
    p = _properties(device.index or 0)
    return 10 * p.major + p.minor


def device_sms(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device (132 on the H200), read once."""
    return _properties(device.index or 0).multi_processor_count


def portable_config(head_dim: int) -> FwdConfig:
    """Pointer loads with tiles that fit every architecture's shared memory without spilling: for
    GPUs other than Hopper, and Hopper inputs TMA cannot read. Chosen by cross-compiling for sm_80,
    sm_89 and sm_90 (tests/test_kernel_report.py); not timed on those GPUs, none could be lent."""
    if head_dim <= 64:
        return FwdConfig(64, 64, 4, 3)
    if head_dim <= 128:
        return FwdConfig(64, 64, 4, 2)
    return FwdConfig(64, 32, 8, 2)


def gluon_config() -> FwdConfig:
    """The Gluon kernel's configuration: two consumer warpgroups of 64 query rows, 128-key tiles,
    two K/V stages, taking turns on the tensor cores (notes/kernel.md)."""
    return FwdConfig(128, 128, 4, 2, "gluon")


def get_fwd_config(head_dim: int, causal: bool, device_type: str, n: int | None = None,
                   batch_heads: int | None = None, sm_count: int | None = None,
                   arch: int = HOPPER) -> FwdConfig:
    """The forward's configuration for a head dim, causality and problem size on a device: on
    Hopper at d = 128, past the launch-bound sizes, the Gluon kernel (it overlaps softmax and tensor
    cores where the tl kernel cannot); everything else, the interpreter included, `tl_config`'s."""
    cfg = tl_config(head_dim, causal, device_type, n, batch_heads, sm_count, arch)
    if device_type == "cuda" and arch == HOPPER and head_dim in GLUON_HEAD_DIMS and cfg.TMA:
        return gluon_config()
    return cfg


def tl_config(head_dim: int, causal: bool, device_type: str, n: int | None = None,
              batch_heads: int | None = None, sm_count: int | None = None, arch: int = HOPPER) -> FwdConfig:
    """The tl kernel's tiles for a head dim, causality and problem size on a device. On Hopper the
    H200 search's winners (notes/kernel.md), through TMA; causal 128-row tiles giving fewer than two
    programs per multiprocessor become 64-row ones. Small, launch-bound problems and every other
    architecture take `portable_config` (a TMA descriptor costs host time at every launch). BLOCK_M
    is a multiple of BLOCK_N. The interpreter, one program at a time, takes the lab's 64 × 64."""
    if device_type != "cuda":
        return FwdConfig(64, 64, 4, 1)
    if arch != HOPPER or head_dim > 128:
        return portable_config(head_dim)
    # below ~1 GFLOP-worth of B·H·N²·d a call is launch-bound: skip the TMA descriptors' host cost
    if n is not None and batch_heads is not None and batch_heads * n * n * head_dim <= 2**30:
        return portable_config(head_dim)
    if causal and n is not None and batch_heads is not None and sm_count is not None:
        if batch_heads * triton.cdiv(n, 128) < 2 * sm_count:
            return FwdConfig(64, 64, 4, 3, "tl_tma")
    if causal and n is not None and n <= 1024:
        # short causal rows: small tiles give more programs to share out rows of unequal length
        return FwdConfig(64, 64, 4, 3, "tl_tma")
    if head_dim == 64:
        # capped at 128 registers, two 8-warp programs share a multiprocessor, and one's matmuls
        # overlap the other's softmax; uncapped, one program fills the register file
        return FwdConfig(128, 128, 8, 2, "tl_tma", MAXNREG=128)
    if head_dim < 64:
        return FwdConfig(128, 128, 4, 3, "tl_tma")
    # the fastest shape that does not spill: 128 x 64 with 4 warps spills at d = 128, and with
    # 8 warps, which does not, it is slower (notes/kernel.md)
    return FwdConfig(128, 128, 8, 3, "tl_tma")


# The backward on Hopper (the H200), per (head dim, causal), none spilling when compiled for sm_90;
# timed with tools/bwd_bench.py (notes/backward.md). Head dims not listed take the next larger one's.
HOPPER_CONFIGS = {
    (64, False): BwdConfig(64, 128, 128, 64, 8, 3, 8, 3),
    (64, True): BwdConfig(64, 128, 128, 64, 8, 3, 8, 3),
    (128, False): BwdConfig(64, 128, 128, 64, 8, 3, 8, 3),
    (128, True): BwdConfig(32, 128, 128, 64, 8, 3, 8, 3),
    (256, False): BwdConfig(32, 32, 32, 32, 8, 1, 8, 1),
    (256, True): BwdConfig(32, 32, 32, 32, 8, 1, 8, 1),
}
# Other GPUs: tiles whose shared memory (at most 80 KiB on sm_90) fits every architecture's 99 KiB
# (sm_86, sm_89); not timed there.
PORTABLE_CONFIGS = {64: BwdConfig(64, 128, 128, 64, 8, 2, 8, 2), 128: BwdConfig(32, 64, 64, 32, 4, 2, 4, 2),
                    256: BwdConfig(32, 32, 32, 32, 8, 1, 8, 1)}
# The interpreter runs one program at a time: few, mid-sized tiles; BLOCK_N1 > BLOCK_M1 and
# BLOCK_M2 > BLOCK_N2, so a causal diagonal spans several inner steps, as on the GPU.
INTERPRETER_CONFIG = BwdConfig(32, 64, 64, 32, 4, 1, 4, 1)

# gluon_ws per (head dim, causal): (BLOCK_M1, num_stages_kv), FlashAttention-3's tiles where powers
# of two allow, none spilling on sm_90 (tools/bwd_ws_report.py; timed in notes/backward.md). With dQ
# in the kernel, d = 64's 128 rows take Pᵀ and dSᵀ through shared memory; d = 128 keeps 64 (128 rows
# would not fit its shared memory).
GLUON_WS_TILES = {(64, False): (128, 2), (64, True): (128, 2), (128, False): (64, 2), (128, True): (64, 2)}
# The shortest sequence gluon_ws is picked for: FlashAttention's grid starts here. Shorter ones, the
# lab grid's N = 64 and 256, keep the tl kernels.
WS_MIN_N = 1024


class DqPass(NamedTuple):
    """Where the policy runs the Gluon dQ pass beside gluon_ws: its K/V stages, its consumer
    warpgroups, and the shortest N it is picked for (the tl pass below; three consumers:
    `dq_consumers`)."""

    stages: int
    consumers: int = 2
    min_n: int = WS_MIN_N


# Timed on the H200 against the tl pass (tools/dq_pass_probe.py; notes/backward.md): two consumers
# and 4 stages win from N = 1024 but at d = 64 not causal, where three win from N = 4096.
GLUON_DQ_PASS = {(64, False): DqPass(4, consumers=3, min_n=4096), (64, True): DqPass(4),
                 (128, False): DqPass(4), (128, True): DqPass(4)}
# Three consumers take 192 query rows a program: they need many waves over the SMs, or the last,
# partial wave costs more than the third warpgroup saves (21 waves won, 1.3 lost; notes/backward.md).
THREE_CONSUMERS_MIN_WAVES = 8


def dq_programs(n: int, heads: int, consumers: int) -> int:
    """Programs of the Gluon dQ pass: query tiles of 64 rows per consumer, times B·H (`heads`)."""
    return heads * -(-n // (GLUON_DQ_TILES[consumers][0]))


def dq_consumers(head_dim: int, causal: bool, n: int, heads: int | None = None,
                 sms: int | None = None) -> int | None:
    """The Gluon dQ pass's consumer warpgroups at (B·H = `heads`, N = n) on `sms` SMs; None where
    the tl pass runs. Two from the pass's `min_n`; where the pass has three (d = 64 not causal),
    three from `min_n` where their programs fill `THREE_CONSUMERS_MIN_WAVES` waves, two where two's
    programs fit in one wave, else the tl pass (notes/backward.md). Without `heads` or `sms`, by N
    alone."""
    dq_pass = GLUON_DQ_PASS[(head_dim, bool(causal))]
    if dq_pass.consumers != 3:
        return dq_pass.consumers if n >= dq_pass.min_n else None
    if heads is None or sms is None:
        return 3 if n >= dq_pass.min_n else None
    if n >= dq_pass.min_n and dq_programs(n, heads, 3) >= THREE_CONSUMERS_MIN_WAVES * sms:
        return 3
    if n >= WS_MIN_N and dq_programs(n, heads, 2) <= sms:
        return 2
    return None


def gluon_ws_config(head_dim: int, causal: bool, dq: str = "tl_pass",
                    consumers: int | None = None) -> BwdConfig:
    """gluon_ws at a head dim it is built for (64, 128), with `dq`: the tl pass of the Hopper table,
    the Gluon pass (its stages from `GLUON_DQ_PASS`, its consumers `consumers` or that table's,
    whatever N), or in the kernel."""
    if head_dim not in GLUON_BWD_HEAD_DIMS:
        raise ValueError(f"the Gluon backward is built for head dims {GLUON_BWD_HEAD_DIMS}, got {head_dim}")
    rows, stages = GLUON_WS_TILES[(head_dim, bool(causal))]
    cfg = replace(HOPPER_CONFIGS[(head_dim, bool(causal))], BLOCK_M1=rows, BLOCK_N1=WS_KEYS,
                  num_warps_kv=WS_WARPS, num_stages_kv=stages, dkdv="gluon_ws")
    if dq != "gluon_pass":
        return replace(cfg, dq=dq)
    dq_pass = GLUON_DQ_PASS[(head_dim, bool(causal))]
    m2, n2, warps = GLUON_DQ_TILES[consumers or dq_pass.consumers]
    return replace(cfg, BLOCK_M2=m2, BLOCK_N2=n2, num_warps_q=warps, num_stages_q=dq_pass.stages, dq=dq)


def tl_bwd_config(head_dim: int, causal: bool, device_type: str, arch: int = HOPPER) -> BwdConfig:
    """The tl kernels' configuration: the Hopper table on Hopper, the portable one elsewhere, the
    interpreter's on the CPU."""
    if device_type != "cuda":
        return INTERPRETER_CONFIG
    d = min(hd for hd in PORTABLE_CONFIGS if hd >= head_dim)  # head dims go up to 256
    return HOPPER_CONFIGS[(d, bool(causal))] if arch == HOPPER else PORTABLE_CONFIGS[d]


def get_bwd_config(head_dim: int, causal: bool, device_type: str, arch: int = HOPPER,
                   n: int | None = None, deterministic: bool = True, heads: int | None = None,
                   sms: int | None = None) -> BwdConfig:
    """The backward's configuration when none is given (arch: major·10 + minor; n: N, None for the
    tl table; heads: B·H and sms, for the dQ pass's programs): on Hopper, compiled, at its head dims
    and N >= WS_MIN_N, gluon_ws, dQ by the Gluon pass where `dq_consumers` picks it, else the tl one,
    or with deterministic False in the kernel (faster, dQ's last bits vary); else the tl table's."""
    if (device_type == "cuda" and arch == HOPPER and not INTERPRETED and head_dim in GLUON_BWD_HEAD_DIMS
            and n is not None and n >= WS_MIN_N):
        if not deterministic:
            return gluon_ws_config(head_dim, causal, "in_kernel")
        consumers = dq_consumers(head_dim, causal, n, heads, sms)
        return gluon_ws_config(head_dim, causal, "tl_pass" if consumers is None else "gluon_pass", consumers)
    return tl_bwd_config(head_dim, causal, device_type, arch)
