"""The launch, shared by every kernel: the configuration a call runs (`launch_config`,
`launch_bwd_config`: the policy's or the caller's, a kernel that cannot read the inputs replaced by
the tl one); the base-2 constants (`LOG2E`, `LN2`); the one-axis grid (`grid`); what Triton's
launcher reads of a TMA descriptor (`HostDescriptor`); the forward's calls made before
(`LAUNCHES`), whose compiled kernel a repeat launches directly (`run`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from minimodel.kernel import policy
from minimodel.kernel.config import BwdConfig, FwdConfig
from minimodel.kernel.inputs import INTERPRETED
from minimodel.kernel.policy import HOPPER, device_arch, device_sms

LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x·log2 e)
LN2 = tl.constexpr(0.6931471805599453)  # ln(2): ln(x) = log2(x)·ln 2, in the kernels
MAX_PROGRAMS = 2**31 - 1  # a CUDA grid's x dimension; the kernel's one launch axis


def grid(N: int, batch_heads: int, block_m: int) -> tuple[int, int, int]:
    """One program per (query tile, batch·head), all on the grid's x axis (`flash._program_ids`).
    Three dimensions, as a compiled kernel's direct launch takes them (Triton's JIT takes any)."""
    programs = triton.cdiv(N, block_m) * batch_heads
    if programs > MAX_PROGRAMS:
        raise ValueError(f"B·H·⌈N/BLOCK_M⌉ = {batch_heads}·⌈{N}/{block_m}⌉ = {programs} programs; "
                         f"one launch holds at most {MAX_PROGRAMS}: split the batch")
    return (programs, 1, 1)


class HostDescriptor(NamedTuple):
    """What Triton's launcher reads of a host tensor descriptor: for a kernel already compiled it
    encodes the TMA descriptor from these alone, without a `TensorDescriptor`'s checks."""

    base: torch.Tensor
    shape: list
    strides: list
    padding: str = "zero"


class Launch(NamedTuple):
    """How a call ran: its configuration, and the kernel Triton compiled for it (None under the
    interpreter, which compiles nothing)."""

    cfg: FwdConfig
    compiled: object


# Calls made before, by everything their launch depends on (`launch_key`): a repeat skips the checks,
# the policy and Triton's argument binder (most of a call's host time, notes/kernel.md) and launches
# the first one's compiled kernel; equal devices, dtypes, shapes, strides and addresses modulo 16
# make every argument Triton specializes on equal (O and LSE are fresh, 16-byte aligned). Emptied
# when it holds MAX_LAUNCHES shapes.
LAUNCHES: dict = {}
MAX_LAUNCHES = 4096


def launch_key(Q, K, V, causal, return_lse, config) -> tuple:
    return (Q.device, K.device, V.device, Q.dtype, K.dtype, V.dtype, Q.shape, K.shape, V.shape,
            Q.stride(), K.stride(), V.stride(), Q.data_ptr() % 16, K.data_ptr() % 16, V.data_ptr() % 16,
            bool(causal), bool(return_lse), config)


def remember(key: tuple, launch: Launch) -> None:
    """Keep how the call of `key` ran, for its repeats."""
    if len(LAUNCHES) >= MAX_LAUNCHES:
        LAUNCHES.clear()
    LAUNCHES[key] = launch


def run(make, Q, K, V, O, LSE, qk_scale: float, cfg: FwdConfig, causal: bool, store_lse: bool,
        compiled=None):
    """Run the kernel whose call `make` describes (`flash.arguments` or `hopper.arguments`: kernel,
    grid, arguments, options): through Triton's JIT, which returns the kernel it compiled (None
    under the interpreter), or `compiled` launched directly."""
    if compiled is not None:
        _, launch_grid, args, _ = make(Q, K, V, O, LSE, qk_scale, cfg, causal, store_lse, full=False)
        compiled[launch_grid](*args.values())
        return compiled
    kernel, launch_grid, args, options = make(Q, K, V, O, LSE, qk_scale, cfg, causal, store_lse)
    compiled = kernel[launch_grid](**args, **options)
    return None if INTERPRETED else compiled


def tma_ok(*tensors) -> bool:
    """Whether the tl kernel's TMA descriptors can read these: unit stride on d, every other stride
    a multiple of 16 bytes, 16-byte aligned base."""
    return all(t.stride(-1) == 1 and all((s * t.element_size()) % 16 == 0 for s in t.stride()[:-1])
               and t.data_ptr() % 16 == 0 for t in tensors)


def gluon_readable(*tensors) -> bool:
    """Whether the Gluon kernels' 4-D descriptors (`hopper._descriptor`) can read these: float16 or
    bfloat16, unit stride on d, every other stride a positive multiple of 16 bytes, 16-byte aligned
    base (a size-1 dimension's stride does not matter)."""
    for t in tensors:
        if t.dtype not in (torch.float16, torch.bfloat16) or t.stride(-1) != 1 or t.data_ptr() % 16:
            return False
        for size, stride in zip(t.shape[:-1], t.stride()[:-1], strict=True):
            if size > 1 and (stride <= 0 or (stride * t.element_size()) % 16):
                return False
    return True


def _hopper_compiled(q: torch.Tensor) -> bool:
    """The Gluon kernels run compiled on Hopper only: they have no interpreter."""
    return not INTERPRETED and q.device.type == "cuda" and device_arch(q.device) == HOPPER


def policy_args(Q: torch.Tensor, causal: bool) -> tuple:
    """The forward policy's arguments (`policy.get_fwd_config`) for Q of shape (B, H, N, d)."""
    B, H, N, d = Q.shape
    if Q.device.type != "cuda":
        return d, causal, Q.device.type
    return d, causal, "cuda", N, B * H, device_sms(Q.device), device_arch(Q.device)


def default_config(Q: torch.Tensor, causal: bool) -> FwdConfig:
    """The configuration `flash_attn_forward` chooses for Q of shape (B, H, N, d) when none is given."""
    return policy.get_fwd_config(*policy_args(Q, causal))


def launch_config(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, causal: bool,
                  config: FwdConfig | None = None) -> FwdConfig:
    """The configuration a forward call really runs: `config` or the default, with TMA only where it
    can be. "tl_tma" needs compute capability 9 and TMA-readable inputs (`tma_ok`), else it runs as
    `policy.portable_config`; "gluon" needs Hopper, compiled, d in `policy.GLUON_HEAD_DIMS` and
    `gluon_readable` inputs, else the tl kernel's choice runs (`policy.tl_config`). Every
    correctness and timing row records it."""
    cfg = config or default_config(Q, causal)
    if cfg.path == "gluon":
        if _hopper_compiled(Q) and Q.shape[-1] in policy.GLUON_HEAD_DIMS and gluon_readable(Q, K, V):
            return cfg
        return launch_config(Q, K, V, causal, policy.tl_config(*policy_args(Q, causal)))
    if cfg.path == "tl":
        return cfg
    tma_hardware = Q.device.type == "cpu" or device_arch(Q.device) >= HOPPER  # the interpreter has it
    return cfg if tma_hardware and tma_ok(Q, K, V) else policy.portable_config(Q.shape[-1])


def default_bwd_config(q: torch.Tensor, causal: bool, deterministic: bool = True) -> BwdConfig:
    """The configuration `flash_attn_backward` runs for q of shape (B, H, N, d) when none is given.
    deterministic False is not honoured while `torch.use_deterministic_algorithms` is on."""
    arch = device_arch(q.device) if q.device.type == "cuda" else HOPPER
    sms = device_sms(q.device) if q.device.type == "cuda" else None
    deterministic = deterministic or torch.are_deterministic_algorithms_enabled()
    return policy.get_bwd_config(q.shape[-1], causal, q.device.type, arch, n=q.shape[-2],
                                 deterministic=deterministic, heads=q.shape[0] * q.shape[1], sms=sms)


def gluon_ok(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor | None = None) -> bool:
    """Whether the Gluon backward can run on these inputs: compiled, on Hopper, at a head dim it is
    built for, every input `gluon_readable`. do None: a fresh contiguous dO, as `backward_fn` draws."""
    if not _hopper_compiled(q) or q.shape[-1] not in policy.GLUON_BWD_HEAD_DIMS:
        return False
    return gluon_readable(q, k, v) and (do is None or gluon_readable(do))


def launch_bwd_config(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                      config: BwdConfig | None = None, do: torch.Tensor | None = None,
                      deterministic: bool = True) -> BwdConfig:
    """The configuration a call of `flash_attn_backward` on these inputs really runs: `config` or
    the default (`default_bwd_config(q, causal, deterministic)`); a gluon_ws one where the Gluon
    kernels cannot run becomes the tl table's. Its `dkdv` and `dq` say which kernels run,
    `deterministic` whether its bits repeat: what a timing or correctness row records."""
    cfg = config or default_bwd_config(q, causal, deterministic)
    if cfg.dkdv == "gluon_ws" and not gluon_ok(q, k, v, do):
        arch = device_arch(q.device) if q.device.type == "cuda" else HOPPER
        return policy.tl_bwd_config(q.shape[-1], causal, q.device.type, arch)
    return cfg
