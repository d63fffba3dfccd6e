"""The backward's rows of the DRAM-bytes stage (`minimodel.gpu.hbm`): the gradient pass alone,
measured under Nsight Compute as the forward is, beside `minimodel.symbolic_backward`'s model.

The points are the forward's (`hbm.plan`: N × d × causal × one head and many heads, batch 1,
float16), each with `direction` = backward, for the model's two schemes:
- naive: theory 02's naive backward (`attention_ref.attn_naive_backward`, one op per step as
  autograd runs them) from P as the naive forward stores it, made before the profiled range, so P
  is read by the backward as `symbolic_backward.naive_backward_transfers` counts. It runs on the
  calling thread: autograd's own engine would launch the kernels from a thread of its own, outside
  the profiled NVTX range, and ncu would profile none of them (seen on the H200);
- flash: this project's Triton backward alone (`kernel.backward.backward_fn`: the forward's O and
  log-sum-exp saved before the profiled range), its preprocess, dK/dV kernel and dQ kernel: the
  model's separate dQ pass (`contract.DQ_SEPARATE_PASS`).
dO is drawn from the row's seed, beside Q, K and V. Only the backward's kernels run in the
profiled range. The model (`model_columns`) counts every read and write of one head, the
gradients' final writes included (`symbolic_backward.bytes_by_rw`), and, as `model_consistent_bytes`,
the consistent total that leaves them out; the lab has no backward formulas (`model_lab_bytes`
empty). The flash model's tile is the dK/dV kernel's (BLOCK_M1 query rows past BLOCK_N1 key
rows); the dQ kernel's tile is recorded beside it (`cfg_BLOCK_M2`, `cfg_BLOCK_N2`). Causal rows,
as the forward's, are set beside the non-causal model.
"""

from __future__ import annotations

import torch

from minimodel import contract, symbolic, symbolic_backward
from minimodel.attention_ref import attn_naive_backward, softmax_probabilities
from minimodel.kernel.backward import backward_fn, default_bwd_config

DTYPE_BYTES = symbolic.DTYPE_BYTES["float16"]  # the stage's dtype (hbm.DTYPE)
IMPLEMENTATIONS = (contract.NAIVE_SCHEME, contract.FLASH_SCHEME)
DQ = {contract.NAIVE_SCHEME: None, contract.FLASH_SCHEME: contract.DQ_SEPARATE_PASS}


def is_backward(row: dict) -> bool:
    return row.get("direction") == contract.BACKWARD


def device_bytes(impl: str, heads: int, n: int, d: int) -> int:
    """What one backward call holds on the device: Q, K, V, O, dO, dQ, dK, dV, the float32 LSE and
    D; naive's S and P kept by autograd, its dP and dS (and a causal mask)."""
    tensors = 8 * heads * n * d * DTYPE_BYTES + 2 * heads * n * 4
    if impl == contract.NAIVE_SCHEME:
        tensors += 4 * heads * n * n * DTYPE_BYTES + n * n
    return tensors


def plan_rows(points: list[dict]) -> list[dict]:
    """The backward's rows at the forward's points (without the dtype and device columns `hbm.plan`
    adds to every row)."""
    return [{**point, "impl": impl, "direction": contract.BACKWARD, "dq_accumulation": DQ[impl] or ""}
            for point in points for impl in IMPLEMENTATIONS]


def compulsory_bytes(n: int, d: int) -> float:
    """The least a backward moves: Q, K, V, O and dO read once, dQ, dK and dV written once."""
    return float(8 * n * d * DTYPE_BYTES)


def model_columns(row: dict, block_m: int, block_n: int) -> dict:
    """The backward's model at the row's point, for all its heads, with the dK/dV kernel's tile."""
    n, d, heads = row["N"], row["d"], row["B"] * row["H"]
    flash = row["impl"] == contract.FLASH_SCHEME
    tile = (block_m, block_n) if flash else (1, 1)  # naive has no tile
    dq = DQ[row["impl"]]
    by_rw = symbolic_backward.bytes_by_rw(row["impl"], n, d, *tile, DTYPE_BYTES, contract.BACKWARD, dq)
    consistent = symbolic_backward.model_bytes(row["impl"], n, d, *tile, DTYPE_BYTES, contract.BACKWARD, dq)
    return {"model_B_r": tile[0] if flash else None, "model_B_c": tile[1] if flash else None,
            "model_read_bytes": heads * by_rw["R"], "model_write_bytes": heads * by_rw["W"],
            f"model_{contract.LAB_CONVENTION}_bytes": None,
            f"model_{contract.CONSISTENT_CONVENTION}_bytes": heads * consistent,
            "compulsory_bytes": heads * compulsory_bytes(n, d)}


def call(row: dict, q, k, v, generator):
    """The row's backward as a call of no arguments returning dQ; its forward already run (outside
    the profiled range), dO drawn from `generator`."""
    do = torch.randn(q.shape, device=q.device, dtype=q.dtype, generator=generator)
    if row["impl"] == contract.FLASH_SCHEME:
        run = backward_fn(q, k, v, row["causal"], do=do)
        return lambda: run()[0]
    # theory 02's naive backward, one op per step on this thread (autograd would run it on a thread
    # of its own, outside the profiled NVTX range), from P as the naive forward stores it
    P = softmax_probabilities(q, k, causal=row["causal"])
    return lambda: attn_naive_backward(q, k, v, P, do)[0]


def flash_config(row: dict) -> tuple[int, int, dict]:
    """The dK/dV kernel's tile the Triton backward runs at the row's shape, and the columns that
    record its whole configuration."""
    q = torch.empty(row["B"], row["H"], row["N"], row["d"], device="cuda", dtype=torch.float16)
    cfg = default_bwd_config(q, row["causal"])
    return cfg.BLOCK_M1, cfg.BLOCK_N1, {f"cfg_{name}": getattr(cfg, name) for name in
                                        ("BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2", "ATOMIC_DQ")}
