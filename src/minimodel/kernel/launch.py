"""How a call of the forward reaches its kernel, shared by both kernels (the tl one in `flash`, the
Gluon one for Hopper in `hopper`), neither of which imports the other for it:

- the base-2 constants: a call passes qk_scale = sm_scale · log2(e) (`LOG2E`), and a kernel turns
  its base-2 log-sum-exp back to natural log (`LN2`);
- the one-axis grid and its limit (`grid`, `MAX_PROGRAMS`);
- what Triton's launcher reads of a TMA descriptor (`HostDescriptor`);
- the calls made before (`LAUNCHES`), whose compiled kernel a repeat launches directly (`run`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from minimodel.kernel.config import FwdConfig
from minimodel.kernel.inputs import INTERPRETED

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
    """What Triton's launcher reads of a host tensor descriptor (base, shape, strides, padding):
    for a kernel already compiled it encodes the TMA descriptor from these alone, so the checks a
    `TensorDescriptor` runs at construction (paid once, by the call that compiled) are not paid
    again. Both kernels' direct launches pass these."""

    base: torch.Tensor
    shape: list
    strides: list
    padding: str = "zero"


class Launch(NamedTuple):
    """How a call ran: its configuration, and the kernel Triton compiled for it (None under the
    interpreter, which compiles nothing)."""

    cfg: FwdConfig
    compiled: object


# Calls made before, by everything their launch depends on (`launch_key`). A repeat skips the
# argument checks, the tile policy and Triton's argument binder, and launches the kernel compiled
# for the first one directly: with equal devices, dtypes, shapes, strides and input addresses
# modulo 16, every argument Triton specializes on is equal too (O and LSE are fresh allocations,
# 16-byte aligned). Triton 3.6 spends most of a call's host time binding arguments
# (notes/kernel.md). Emptied when it holds MAX_LAUNCHES shapes.
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
