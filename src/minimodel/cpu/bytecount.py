"""Measured byte traffic across the slow-memory boundary (notes/labs.md, lab 01 C), two ways.

1. The instrumented count (`minimodel.cpu.slow_memory`): the inputs in slow memory, every aten op
   that touches them counted, results over the on-chip budget (theory 02's 64 KiB of SRAM) left
   there, smaller ones on chip and free.
2. `profiler_bytes`, lab 01's way: `torch.profiler` with memory profiling. It sees what each
   op allocates (the bytes of every new tensor it writes) and the shapes of its inputs, but it
   knows nothing of on-chip budgets, views or in-place writes: its numbers are set beside the
   instrumented ones, not used as the measurement.

`measure()` runs one reference under both and returns one tidy row, beside the byte model's
bytes (`minimodel.floor.byte_model`), in either pass (`direction`):
- the forward: naive attention (`attention_ref.attn_naive`) and theory 02's tiled loop
  (`minimodel.cpu.references`), beside `byte_model.forward`;
- the backward: the naive backward from the stored P (`attention_ref.attn_naive_backward`) and
  FlashAttention-2's tiled backward (`minimodel.cpu.backward`), beside `byte_model.backward`.
  What the forward handed the backward is an input, in slow memory and not counted as traffic of
  the backward: P for the naive one, O and LSE for the flash one. The writes of the gradients dQ,
  dK and dV are split off (`grad_write_bytes`), as the consistent convention leaves them out.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import sys
import tempfile
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile
from tqdm import tqdm

from minimodel.cpu import backward, references
from minimodel.cpu.slow_memory import THEORY_SRAM_BYTES, ByteCounter, count_bytes, unwrap
from minimodel.floor import attention_ref, contract
from minimodel.floor.byte_model import backward as backward_model
from minimodel.floor.byte_model.forward import DTYPE_BYTES, model_bytes
from minimodel.floor.contract import (
    BYTES_SCHEMES,
    CONSISTENT_CONVENTION,
    FLASH_SCHEME,
    LAB_TILE,
    NAIVE_FP32_SOFTMAX_SCHEME,
    NAIVE_SCHEME,
)

log = logging.getLogger(__name__)

KINETO_CHATTER = ("USDT:", "STAGE:")  # how Kineto's progress lines begin (its errors: "ERROR:")


@contextlib.contextmanager
def native_stderr_to_python():
    """Send what native code writes to file descriptor 2 inside the block to `sys.stderr`,
    less torch.profiler's own chatter.

    torch.profiler's C++ (Kineto) writes "STAGE:" and "USDT: ... SyncActivityProfilerHandler"
    lines straight to fd 2 at every start and stop, past Python's `sys.stderr`: those lines are
    dropped (they say only that the profiler started and stopped). Anything else, Kineto's
    errors included, goes to `sys.stderr`, which `stage()` points at the rule's log. Lowering
    KINETO_LOG_LEVEL far enough to drop them would drop Kineto's errors too.
    """
    for stream in (sys.stderr, sys.__stderr__):  # what Python holds for fd 2 goes out before it moves
        if stream is not None:
            stream.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            text = "".join(line for line in captured.read().decode(errors="replace").splitlines(True)
                           if not line.startswith(KINETO_CHATTER))
            if text:
                sys.stderr.write(text)


def profiler_bytes(fn: Callable[[], torch.Tensor]) -> dict:
    """What torch.profiler sees of the same run: bytes allocated by ops, bytes of op inputs."""
    with native_stderr_to_python(), profile(activities=[ProfilerActivity.CPU], profile_memory=True,
                                            record_shapes=True) as prof:
        fn()
    allocated = 0
    input_bytes = 0
    for event in prof.events():
        if event.cpu_parent is None:
            # top-level aten ops only: nested ops would count the same tensors twice
            allocated += max(int(event.cpu_memory_usage), 0)
            for shape, dtype in zip(event.input_shapes or [], getattr(event, "input_dtypes", None) or [],
                                    strict=False):
                if shape and dtype in _PROFILER_DTYPE_BYTES:
                    numel = 1
                    for s in shape:
                        numel *= s
                    input_bytes += numel * _PROFILER_DTYPE_BYTES[dtype]
    return {"allocated": allocated, "input_bytes": input_bytes}


# the profiler's names of element types, as it records op inputs
_PROFILER_DTYPE_BYTES = {"float": 4, "c10::Half": 2, "c10::BFloat16": 2, "double": 8}


def model_scheme(scheme: str, dtype: str) -> str:
    """The symbolic scheme a measured reference corresponds to."""
    if scheme == NAIVE_SCHEME and DTYPE_BYTES[dtype] == 2:
        return NAIVE_FP32_SOFTMAX_SCHEME
    return scheme


def measure(scheme: str, n: int, d: int, dtype: str, block_r: int = LAB_TILE[0], block_c: int = LAB_TILE[1],
            sram_bytes: int = THEORY_SRAM_BYTES, with_profiler: bool = False, random_seed: int = 0,
            direction: str = contract.FORWARD) -> dict:
    """Bytes of one reference on one (N, d) head in `direction`, measured and set beside the model."""
    if scheme not in BYTES_SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; accepted: {', '.join(BYTES_SCHEMES)}")
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; accepted: {', '.join(DTYPE_BYTES)}")
    if direction != contract.FORWARD:
        return _measure_backward(scheme, n, d, dtype, block_r, block_c, sram_bytes, with_profiler,
                                 random_seed)
    gen = torch.Generator().manual_seed(random_seed)
    Q, K, V = (torch.randn(n, d, generator=gen).to(getattr(torch, dtype)) for _ in range(3))
    if scheme == NAIVE_SCHEME:
        fn = attention_ref.attn_naive
    else:
        fn = lambda q, k, v: references.attn_flash_reference_cpu(q, k, v, block_r, block_c)
    # The count does not depend on values. The naive reference's N x N matmuls are slow on a CPU
    # in half precision (54 s at N = 16384, d = 128): it is counted on the meta device, which
    # only works out shapes. The flash reference's many small tile ops run faster on real tensors.
    on = "meta" if scheme == NAIVE_SCHEME else "cpu"
    counted = count_bytes(fn, (Q.to(on), K.to(on), V.to(on)), sram_bytes)
    model_name = model_scheme(scheme, dtype)
    model = model_bytes(model_name, n, d, block_r, block_c, DTYPE_BYTES[dtype], CONSISTENT_CONVENTION)
    row = {
        "scheme": scheme, "direction": contract.FORWARD, "model_scheme": model_name, "N": n, "d": d,
        "B_r": block_r, "B_c": block_c, "dtype": dtype, "sram_bytes": sram_bytes,
        "convention": "consistent (O write left out)",
        "bytes_model": model,
        "bytes_instrumented": counted["bytes"],
        "bytes_read": counted["reads"], "bytes_written": counted["writes"],
        "o_write_bytes": counted["o_write"],
        "deviation": (counted["bytes"] - model) / model,
        "bytes_profiler": None, "profiler_input_bytes": None,
    }
    if with_profiler:
        prof = profiler_bytes(lambda: fn(Q, K, V))
        row["bytes_profiler"] = prof["allocated"]
        row["profiler_input_bytes"] = prof["input_bytes"]
    return row


# the backward reference's dQ accumulation, the model it is set beside
REFERENCE_DQ = {NAIVE_SCHEME: None, FLASH_SCHEME: contract.DQ_READ_MODIFY_WRITE}


def count_backward_bytes(fn, inputs, sram_bytes: int = THEORY_SRAM_BYTES) -> dict:
    """Call `fn(*inputs)` -> (dQ, dK, dV) with the inputs in slow memory; the gradients' writes split off."""
    counter = ByteCounter(sram_bytes)
    grads = fn(*(counter.wrap(t) for t in inputs))
    grad_write = sum(counter.writes_to(g) for g in grads)
    return {"reads": counter.reads, "writes": counter.writes - grad_write, "grad_write": grad_write,
            "bytes": counter.total - grad_write,
            "per_op": {k: tuple(v) for k, v in counter.per_op.items()},
            "result": tuple(unwrap(g) for g in grads)}


def backward_inputs(scheme: str, n: int, d: int, dtype: str,
                    random_seed: int = 0) -> tuple[torch.Tensor, ...]:
    """One head's inputs of the backward: Q, K, V, what the forward stored, dO."""
    gen = torch.Generator().manual_seed(random_seed)
    Q, K, V, dO = (torch.randn(n, d, generator=gen).to(getattr(torch, dtype)) for _ in range(4))
    if scheme == NAIVE_SCHEME:
        return Q, K, V, attention_ref.softmax_probabilities(Q, K), dO
    O, lse = backward.forward_with_lse(Q, K, V)
    return Q, K, V, O, lse, dO


def backward_reference(scheme: str, block_r: int, block_c: int):
    """The backward reference of `scheme`, taking the tensors `backward_inputs` makes."""
    if scheme == NAIVE_SCHEME:
        return attention_ref.attn_naive_backward
    return lambda Q, K, V, O, lse, dO: backward.attn_flash_backward_reference_cpu(Q, K, V, O, lse, dO,
                                                                                   block_r, block_c)


def _measure_backward(scheme, n, d, dtype, block_r, block_c, sram_bytes, with_profiler, random_seed) -> dict:
    tensors = backward_inputs(scheme, n, d, dtype, random_seed)
    fn = backward_reference(scheme, block_r, block_c)
    # as the forward's: the naive one's N x N matmuls on the meta device, the flash one's small tile
    # ops on real tensors
    on = "meta" if scheme == NAIVE_SCHEME else "cpu"
    counted = count_backward_bytes(fn, [t.to(on) for t in tensors], sram_bytes)
    dq = REFERENCE_DQ[scheme]
    model = backward_model.model_bytes(scheme, n, d, block_r, block_c, DTYPE_BYTES[dtype],
                                       contract.BACKWARD, dq)
    row = {
        "scheme": scheme, "direction": contract.BACKWARD, "model_scheme": scheme, "N": n, "d": d,
        "B_r": block_r, "B_c": block_c, "dtype": dtype, "sram_bytes": sram_bytes,
        "convention": "consistent (dQ, dK, dV writes left out)",
        "bytes_model": model, "bytes_instrumented": counted["bytes"],
        "bytes_read": counted["reads"], "bytes_written": counted["writes"],
        "o_write_bytes": None, "deviation": (counted["bytes"] - model) / model,
        "bytes_profiler": None, "profiler_input_bytes": None,
        "dq_accumulation": dq, "grad_write_bytes": counted["grad_write"],
    }
    if with_profiler:
        prof = profiler_bytes(lambda: fn(*tensors))
        row["bytes_profiler"] = prof["allocated"]
        row["profiler_input_bytes"] = prof["input_bytes"]
    return row


def memory_needed(n_values) -> dict[str, int]:
    """Bytes the sweep's largest naive point holds at once: fp16's S, S32, P32, P and a margin."""
    return {"cpu.n": 16 * max(n_values) ** 2}


def sweep(n_values, head_dims, dtypes, block_r=64, block_c=64, sram_bytes=THEORY_SRAM_BYTES,
          profiler_max_n=0, random_seed=0, progress=None, direction: str = contract.FORWARD) -> list[dict]:
    """Every (scheme, dtype, d, N) of the CPU stage in `direction`, in that order, as a list of rows,
    with a progress bar naming the pass and the dtypes."""
    points = list(itertools.product(BYTES_SCHEMES, dtypes, head_dims, n_values))
    rows = []
    # the dtypes in the label: the workflow runs one sweep per dtype side by side on one terminal
    name = "cpu bytes" if direction == contract.FORWARD else f"cpu {direction} bytes"
    label = f"{name} {', '.join(dtypes)}"
    for scheme, dtype, d, n in tqdm(points, desc=label, file=progress, mininterval=2):
        rows.append(measure(scheme, n, d, dtype, block_r, block_c, sram_bytes,
                            with_profiler=n <= profiler_max_n, random_seed=random_seed, direction=direction))
        log.info("%s %s N=%d d=%d %s: deviation %.3g", name, scheme, n, d, dtype, rows[-1]["deviation"])
    return rows


