"""The closed-form byte model of the attention backward (notes/backward.md), as `forward` is the
forward's: a per-step list of the reads and writes that cross the slow-memory boundary, summed
with sympy (stage 1 writes it as tables, `minimodel.symbolic`).

The passes (`contract.DIRECTIONS`): the backward alone, and forward + backward (the forward's
consistent sum, `forward.naive_transfers` or `flash_transfers`, plus the log-sum-exp the flash
forward stores for the backward, plus the backward's). One head of Q, K, V, O, dO ∈ ℝ^{N × d}.
Every tensor of the naive scheme is in the input's dtype (no fp32 softmax, so no backward of
`naive_fp32_softmax`).

- **Naive** (`naive_backward_transfers`): the forward stored P (N × N, as PyTorch's autograd keeps
  softmax's output); the backward reads it and materializes dP and dS, as PyTorch's autograd does:
  dV = Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP − rowsum(P ∘ dP)) (softmax's backward, one pass reading dP
  and P), dQ = scale · dS K, dK = scale · dSᵀ Q. Every tensor is in the input's dtype.
- **Flash** (`flash_backward_transfers`), FlashAttention-2's Algorithm 2: first D = rowsum(dO ∘ O),
  Q tile by Q tile; then the outer loop over the N/B_c K/V tiles (K_j, V_j read once, dK_j and
  dV_j accumulated on chip and written once) and, inside it, the N/B_r Q tiles: Q_i, dO_i and the
  forward's LSE_i and D_i read, S and P recomputed (P = exp(scale · Q_i K_jᵀ − LSE_i)),
  dV_j += Pᵀ dO_i, dP = dO_i V_jᵀ, dS = P ∘ (dP − D_i), dK_j += dSᵀ Q_i, dQ_i += dS K_j. O is
  read only for D (Algorithm 2 also loads O_i in the loop, where nothing uses it). How dQ is
  accumulated is a parameter, `dq` (`contract.DQ_ACCUMULATIONS`):
  - `DQ_READ_MODIFY_WRITE` (the tiled CPU reference): dQ_i lives in slow memory in fp32
    (FlashAttention-2's dq_accum); the first K/V tile writes it, each later one reads and writes
    it back: N/B_c writes and N/B_c − 1 reads of N·d fp32 values. A last pass reads it and writes
    dQ in the input's dtype (FlashAttention-2's convert step).
  - `DQ_SEPARATE_PASS` (a dK/dV kernel over K/V tiles and a dQ kernel over Q tiles): the dQ pass
    holds dQ_i on chip, reads Q_i, dO_i, LSE_i, D_i once, streams every K/V tile past it (K and V
    each read N/B_r times, S, P, dP and dS recomputed) and writes dQ once.
  - `DQ_IN_L2` (the dK/dV kernel adds each K/V tile's share of dQ_i into a zero-filled fp32
    accumulator, by atomics or TMA reductions): every K/V tile of a head runs at once (one program
    each, on as many SMs), so the additions to dQ_i, and the reads of Q_i, dO_i, LSE_i and D_i,
    meet in the L2: slow memory sees each of them once, the accumulator written by the zero fill,
    read by the first addition, written back once, and read by the convert step. It holds while a
    head's K/V tiles fit on the device at once and what they share fits in the L2 (measured on the
    H200 at N = 4096: notes/backward.md); past that the traffic tends to `DQ_READ_MODIFY_WRITE`'s.

LSE, D and the dQ accumulator are fp32 (4 bytes) whatever the input's dtype, as in the kernels.

The convention (`contract.CONSISTENT_CONVENTION`, the one every backward row is in): the final
writes of the gradients dQ, dK and dV (each N·d in the input's dtype, written once by both
schemes) are left out, as the forward's consistent convention leaves out O's; `count_grad_writes`
puts them in (`bytes_by_rw`, beside a measurement that sees every write). The lab has no
backward formulas, so there are no backward rows in its convention.

FLOPs follow FlashAttention's benchmarks: the backward counts 2.5 × the forward's 4·N²·d (five
N²·d matmuls: S recomputed, dV, dP, dQ, dK), forward + backward 3.5 ×, whatever the scheme does
(the naive backward multiplies four times, the separate dQ pass seven), halved when causal.
"""

from __future__ import annotations

from functools import cache

import sympy as sp

from minimodel.floor import contract
from minimodel.floor.byte_model import forward
from minimodel.floor.byte_model.forward import B_c, B_r, N, Transfer, d
from minimodel.floor.contract import FLASH_SCHEME, NAIVE_SCHEME

F32 = sp.Integer(4)  # LSE, D and the dQ accumulator
SCHEMES = (NAIVE_SCHEME, FLASH_SCHEME)
RMW, SEPARATE, IN_L2 = contract.DQ_READ_MODIFY_WRITE, contract.DQ_SEPARATE_PASS, contract.DQ_IN_L2
# the accumulations of stage 1's tables: the CPU reference's and the shipped kernel's (the committed
# reference's tables, byte for byte); `DQ_IN_L2` is the GPU bytes stage's model of the in-kernel paths
TABLE_DQ = (RMW, SEPARATE)
# FLOPs of each pass as a multiple of the forward's 4·N²·d (FlashAttention's benchmarks)
FLOP_FACTORS = {contract.FORWARD: 1.0, contract.BACKWARD: 2.5, contract.FWD_BWD: 3.5}
BACKWARD_DIRECTIONS = (contract.BACKWARD, contract.FWD_BWD)


def naive_backward_transfers(count_grad_writes: bool = False) -> list[Transfer]:
    """PyTorch autograd's backward of naive attention, P stored by the forward (module docstring)."""
    steps = [
        Transfer("1: dV = P^T dO", "P", "R", N**2),
        Transfer("1: dV = P^T dO", "dO", "R", N * d),
        Transfer("2: dP = dO V^T", "dO", "R", N * d),
        Transfer("2: dP = dO V^T", "V", "R", N * d),
        Transfer("2: dP = dO V^T", "dP", "W", N**2),
        Transfer("3: dS = P * (dP - rowsum(P * dP))", "dP", "R", N**2),
        Transfer("3: dS = P * (dP - rowsum(P * dP))", "P", "R", N**2),
        Transfer("3: dS = P * (dP - rowsum(P * dP))", "dS", "W", N**2),
        Transfer("4: dQ = scale dS K", "dS", "R", N**2),
        Transfer("4: dQ = scale dS K", "K", "R", N * d),
        Transfer("5: dK = scale dS^T Q", "dS", "R", N**2),
        Transfer("5: dK = scale dS^T Q", "Q", "R", N * d),
    ]
    if count_grad_writes:
        steps += [Transfer("1: dV = P^T dO", "dV", "W", N * d),
                  Transfer("4: dQ = scale dS K", "dQ", "W", N * d),
                  Transfer("5: dK = scale dS^T Q", "dK", "W", N * d)]
    return steps


def flash_backward_transfers(dq: str = RMW, count_grad_writes: bool = False) -> list[Transfer]:
    """FlashAttention-2's backward (Algorithm 2), dQ accumulated as `dq` says (module docstring)."""
    if dq not in contract.DQ_ACCUMULATIONS:
        raise ValueError(f"unknown dQ accumulation {dq!r}; accepted: {', '.join(contract.DQ_ACCUMULATIONS)}")
    kv_tiles, q_tiles = N / B_c, N / B_r
    # how often Q_i, dO_i, LSE_i and D_i reach slow memory
    shared, per = (1, "once, shared in the L2") if dq == IN_L2 else (kv_tiles, "once per K/V tile")
    steps = [
        Transfer("0: D = rowsum(dO * O), per Q tile", "O", "R", N * d),
        Transfer("0: D = rowsum(dO * O), per Q tile", "dO", "R", N * d),
        Transfer("0: D = rowsum(dO * O), per Q tile", "D", "W", N, F32),
        Transfer("1: load K_j, V_j (outer loop, once)", "K", "R", N * d),
        Transfer("1: load K_j, V_j (outer loop, once)", "V", "R", N * d),
        Transfer(f"2: load Q_i, dO_i ({per})", "Q", "R", N * d * shared),
        Transfer(f"2: load Q_i, dO_i ({per})", "dO", "R", N * d * shared),
        Transfer(f"2: load LSE_i, D_i ({per})", "LSE", "R", N * shared, F32),
        Transfer(f"2: load LSE_i, D_i ({per})", "D", "R", N * shared, F32),
    ]
    if dq == IN_L2:
        steps += [
            Transfer("0: dQ_acc = 0", "dQ_acc", "W", N * d, F32),
            Transfer("3: dQ_i += dS K_j (in the L2: the zeros read once)", "dQ_acc", "R", N * d, F32),
            Transfer("3: dQ_i += dS K_j (in the L2: written back once)", "dQ_acc", "W", N * d, F32),
            Transfer("5: dQ = dtype(dQ_acc)", "dQ_acc", "R", N * d, F32),
        ]
    elif dq == RMW:
        steps += [
            Transfer("3: dQ_i += dS K_j (read back after the first K/V tile)", "dQ_acc", "R",
                     N * d * (kv_tiles - 1), F32),
            Transfer("3: dQ_i += dS K_j (written once per K/V tile)", "dQ_acc", "W",
                     N * d * kv_tiles, F32),
            Transfer("5: dQ = dtype(dQ_acc)", "dQ_acc", "R", N * d, F32),
        ]
    else:
        steps += [
            Transfer("5: dQ pass: load Q_i, dO_i", "Q", "R", N * d),
            Transfer("5: dQ pass: load Q_i, dO_i", "dO", "R", N * d),
            Transfer("5: dQ pass: load LSE_i, D_i", "LSE", "R", N, F32),
            Transfer("5: dQ pass: load LSE_i, D_i", "D", "R", N, F32),
            Transfer("5: dQ pass: load K_j, V_j (once per Q tile)", "K", "R", N * d * q_tiles),
            Transfer("5: dQ pass: load K_j, V_j (once per Q tile)", "V", "R", N * d * q_tiles),
        ]
    if count_grad_writes:
        steps += [Transfer("4: store dK_j, dV_j", "dK", "W", N * d),
                  Transfer("4: store dK_j, dV_j", "dV", "W", N * d),
                  Transfer("5: store dQ", "dQ", "W", N * d)]
    return steps


def forward_lse_transfers() -> list[Transfer]:
    """What the flash forward writes for the backward beyond the forward's own count: LSE."""
    return [Transfer("forward: store LSE = m + log(l)", "LSE", "W", N, F32)]


def transfers(scheme: str, direction: str, dq: str | None = None,
              count_grad_writes: bool = False) -> list[Transfer]:
    """The backward's transfers of one scheme; `direction` = FWD_BWD puts the forward's in front
    (the consistent convention's: O's write left out, unless `count_grad_writes`)."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; accepted: {', '.join(SCHEMES)}")
    if direction not in BACKWARD_DIRECTIONS:
        raise ValueError(f"unknown direction {direction!r}; accepted: {', '.join(BACKWARD_DIRECTIONS)}")
    if scheme == NAIVE_SCHEME:
        if dq is not None:
            raise ValueError(f"the naive backward accumulates no dQ over tiles: dq must be None, got {dq!r}")
        steps = naive_backward_transfers(count_grad_writes)
    else:
        steps = flash_backward_transfers(RMW if dq is None else dq, count_grad_writes)
    if direction == contract.FWD_BWD:
        forward_steps = forward.TRANSFERS[scheme](count_grad_writes)
        steps = forward_steps + (forward_lse_transfers() if scheme == FLASH_SCHEME else []) + steps
    return steps


@cache
def derived_bytes(scheme: str, direction: str = contract.BACKWARD, dq: str | None = None) -> sp.Expr:
    """Slow-memory bytes of a scheme's backward (or forward + backward), consistent convention."""
    return sp.factor(sp.simplify(sum(t.bytes for t in transfers(scheme, direction, dq))))


def model_bytes(scheme: str, N: int, d: int, B_r: int = contract.LAB_TILE[0], B_c: int = contract.LAB_TILE[1],
                dtype_bytes: int = 2, direction: str = contract.BACKWARD, dq: str | None = None) -> float:
    """Bytes of one head's backward (or forward + backward) under the consistent convention."""
    forward.check_positive(N=N, d=d, B_r=B_r, B_c=B_c, dtype_bytes=dtype_bytes)
    return float(forward.numeric(derived_bytes(scheme, direction, dq))(N, d, B_r, B_c, dtype_bytes))


def bytes_by_rw(scheme: str, N: int, d: int, B_r: int = contract.LAB_TILE[0], B_c: int = contract.LAB_TILE[1],
                dtype_bytes: int = 2, direction: str = contract.BACKWARD,
                dq: str | None = None) -> dict[str, float]:
    """Bytes read ("R") and written ("W"), every write counted (the gradients', and O's in
    forward + backward): the model beside a measurement that sees reads and writes apart."""
    forward.check_positive(N=N, d=d, B_r=B_r, B_c=B_c, dtype_bytes=dtype_bytes)
    steps = transfers(scheme, direction, dq, count_grad_writes=True)
    return {rw: float(forward.numeric(sum((t.bytes for t in steps if t.direction == rw), sp.Integer(0)))(
        N, d, B_r, B_c, dtype_bytes)) for rw in ("R", "W")}


def flops(N: int, d: int, direction: str = contract.BACKWARD) -> float:
    """FLOPs of one head's pass: FLOP_FACTORS[direction] × 4·N²·d (FlashAttention's benchmarks)."""
    if direction not in FLOP_FACTORS:
        raise ValueError(f"unknown direction {direction!r}; accepted: {', '.join(FLOP_FACTORS)}")
    return FLOP_FACTORS[direction] * forward.flops(N, d)


def attention_flops(B: int, H: int, N: int, d: int, causal: bool,
                    direction: str = contract.BACKWARD) -> float:
    """FLOPs of a batch of B·H heads in one pass, halved when causal (`forward.attention_flops`)."""
    if direction not in FLOP_FACTORS:
        raise ValueError(f"unknown direction {direction!r}; accepted: {', '.join(FLOP_FACTORS)}")
    return FLOP_FACTORS[direction] * forward.attention_flops(B, H, N, d, causal)


def variants() -> list[tuple[str, str | None]]:
    """(scheme, dq) of every backward stage 1's tables and the CPU's figure hold: `TABLE_DQ`."""
    return [(NAIVE_SCHEME, None)] + [(FLASH_SCHEME, dq) for dq in TABLE_DQ]
