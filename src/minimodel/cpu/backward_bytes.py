"""Measured byte traffic of the backward references (`minimodel.cpu.backward`), counted as the
forward's are (`minimodel.cpu.bytecount`: inputs in slow memory, results over the on-chip budget
stay there) and set beside the model (`minimodel.byte_model.backward`).

What the forward handed the backward is an input, in slow memory and not counted as traffic of
the backward: P for the naive one, O and LSE for the flash one. The writes of the gradients dQ,
dK and dV are split off (`grad_write_bytes`), as the consistent convention leaves them out.
"""

from __future__ import annotations

import torch

from minimodel import attention_ref, contract
from minimodel.byte_model import backward as backward_model
from minimodel.byte_model.forward import DTYPE_BYTES
from minimodel.contract import BYTES_SCHEMES, FLASH_SCHEME, NAIVE_SCHEME
from minimodel.cpu import backward, bytecount
from minimodel.cpu.slow_memory import THEORY_SRAM_BYTES, ByteCounter, unwrap

# the flash reference's dQ accumulation, the model it is set beside
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


def inputs(scheme: str, n: int, d: int, dtype: str, random_seed: int = 0) -> tuple[torch.Tensor, ...]:
    """One head's inputs of the backward: Q, K, V, what the forward stored, dO."""
    gen = torch.Generator().manual_seed(random_seed)
    Q, K, V, dO = (torch.randn(n, d, generator=gen).to(getattr(torch, dtype)) for _ in range(4))
    if scheme == NAIVE_SCHEME:
        return Q, K, V, attention_ref.softmax_probabilities(Q, K), dO
    O, lse = backward.forward_with_lse(Q, K, V)
    return Q, K, V, O, lse, dO


def reference(scheme: str, block_r: int, block_c: int):
    """The reference of `scheme`, taking the tensors `inputs` makes."""
    if scheme == NAIVE_SCHEME:
        return attention_ref.attn_naive_backward
    return lambda Q, K, V, O, lse, dO: backward.attn_flash_backward_reference_cpu(Q, K, V, O, lse, dO,
                                                                                   block_r, block_c)


def measure(scheme: str, n: int, d: int, dtype: str, block_r: int = 64, block_c: int = 64,
            sram_bytes: int = THEORY_SRAM_BYTES, with_profiler: bool = False,
            random_seed: int = 0) -> dict:
    """Bytes of one backward reference on one (N, d) head, measured and set beside the model."""
    if scheme not in BYTES_SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; accepted: {', '.join(BYTES_SCHEMES)}")
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; accepted: {', '.join(DTYPE_BYTES)}")
    tensors = inputs(scheme, n, d, dtype, random_seed)
    fn = reference(scheme, block_r, block_c)
    # The count does not depend on values: the naive one's N x N matmuls run on the meta device,
    # which only works out shapes (as the forward's); the flash one's small tile ops on real tensors.
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
        prof = bytecount.profiler_bytes(lambda: fn(*tensors))
        row["bytes_profiler"] = prof["allocated"]
        row["profiler_input_bytes"] = prof["input_bytes"]
    return row


def sweep(n_values, head_dims, dtypes, block_r=64, block_c=64, sram_bytes=THEORY_SRAM_BYTES,
          profiler_max_n=0, random_seed=0, progress=None) -> list[dict]:
    """Every (scheme, N, d, dtype) of the CPU stage's backward, as a list of rows."""
    return bytecount.measure_points(measure, BYTES_SCHEMES, "cpu backward bytes", n_values, head_dims, dtypes,
                                    block_r, block_c, sram_bytes, profiler_max_n, random_seed, progress)
