"""The closed-form byte model of naive and flash attention's forward (notes/labs.md: lab 01 A and
B, theory 02): what every stage sets its measurements beside (stage 1 writes it as tables,
`minimodel.symbolic`).

The closed forms are not typed in: they are summed with sympy from a per-step list of the
reads and writes that cross the slow-memory boundary (HBM on a GPU), one list per scheme,
exactly as theory 02 accounts for them. `lab_forms()` holds the lab's formulas as written;
tests check that the derived sums equal them.

Two conventions for the write of O (both schemes write O once), named in `contract.CONVENTIONS`:
- the lab's (`contract.LAB_CONVENTION`): its formulas as written. The naive one leaves the write
  of O out, the flash one counts it, so they are not quite comparable.
- `contract.CONSISTENT_CONVENTION`: the write of O is left out of both. Every measured comparison in this
  project (the CPU byte counts of stage 2, the plots) uses this one.

Per element, the lab charges `dtype_bytes` for every tensor. `contract.NAIVE_FP32_SOFTMAX_SCHEME`
is the accounting of a half-precision naive attention computed the way PyTorch does it for
stability: S is upcast to fp32, the softmax runs in fp32, P is cast back (theory 02:
"closer to ~24 N^2").
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import sympy as sp

from minimodel.floor import contract
from minimodel.floor.contract import (
    CONSISTENT_CONVENTION,
    FLASH_SCHEME,
    LAB_CONVENTION,
    LAB_TILE,
    NAIVE_FP32_SOFTMAX_SCHEME,
    NAIVE_SCHEME,
)

N, d, B_r, B_c, dtype_bytes = sp.symbols("N d B_r B_c dtype_bytes", positive=True)

# the lab's tile (LAB_TILE) is every default tile here
SCHEMES = (NAIVE_SCHEME, NAIVE_FP32_SOFTMAX_SCHEME, FLASH_SCHEME)
# Bytes per element of each dtype the project accepts, by its name (the torch attribute's name).
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}


@dataclass(frozen=True)
class Transfer:
    """One tensor crossing the slow-memory boundary in one step of the algorithm."""

    step: str
    tensor: str
    direction: str  # "R" (read from slow memory) or "W" (written to it)
    elements: sp.Expr
    bytes_per_element: sp.Expr = dtype_bytes

    @property
    def bytes(self) -> sp.Expr:
        return self.elements * self.bytes_per_element


def naive_transfers(count_o_write: bool) -> list[Transfer]:
    """Theory 02's naive accounting: S = QK^T, P = softmax(S), O = PV, all through HBM."""
    steps = [
        Transfer("1: S = Q K^T", "Q", "R", N * d),
        Transfer("1: S = Q K^T", "K", "R", N * d),
        Transfer("1: S = Q K^T", "S", "W", N**2),
        Transfer("2: P = softmax(S)", "S", "R", N**2),
        Transfer("2: P = softmax(S)", "P", "W", N**2),
        Transfer("3: O = P V", "P", "R", N**2),
        Transfer("3: O = P V", "V", "R", N * d),
    ]
    if count_o_write:
        steps.append(Transfer("3: O = P V", "O", "W", N * d))
    return steps


def naive_fp32_softmax_transfers(count_o_write: bool) -> list[Transfer]:
    """Naive attention in a 2-byte dtype whose softmax runs in fp32 (S upcast, P cast back)."""
    f32 = sp.Integer(4)
    steps = [
        Transfer("1: S = Q K^T", "Q", "R", N * d),
        Transfer("1: S = Q K^T", "K", "R", N * d),
        Transfer("1: S = Q K^T", "S", "W", N**2),
        Transfer("2a: S32 = float(S)", "S", "R", N**2),
        Transfer("2a: S32 = float(S)", "S32", "W", N**2, f32),
        Transfer("2b: P32 = softmax(S32)", "S32", "R", N**2, f32),
        Transfer("2b: P32 = softmax(S32)", "P32", "W", N**2, f32),
        Transfer("2c: P = half(P32)", "P32", "R", N**2, f32),
        Transfer("2c: P = half(P32)", "P", "W", N**2),
        Transfer("3: O = P V", "P", "R", N**2),
        Transfer("3: O = P V", "V", "R", N * d),
    ]
    if count_o_write:
        steps.append(Transfer("3: O = P V", "O", "W", N * d))
    return steps


def flash_transfers(count_o_write: bool) -> list[Transfer]:
    """Theory 02's flash accounting (FlashAttention-2 order: Q tiles outside).

    Each of the N/B_r query tiles is loaded once; for each of them every K and V tile is
    loaded once, so K and V each cross N/B_r times. S, P and the running m, l stay on chip.
    B_c does not appear: it changes how K and V are cut, not how often they are read.
    """
    steps = [
        Transfer("load Q tiles", "Q", "R", N * d),
        Transfer("load K tiles (once per Q tile)", "K", "R", N * d * N / B_r),
        Transfer("load V tiles (once per Q tile)", "V", "R", N * d * N / B_r),
    ]
    if count_o_write:
        steps.append(Transfer("store O tiles", "O", "W", N * d))
    return steps


TRANSFERS = {
    NAIVE_SCHEME: naive_transfers,
    NAIVE_FP32_SOFTMAX_SCHEME: naive_fp32_softmax_transfers,
    FLASH_SCHEME: flash_transfers,
}


def counts_o_write(scheme: str, convention: str) -> bool:
    """Whether the write of O is in the sum: the lab's naive formula omits it, its flash one counts it."""
    if convention not in contract.CONVENTIONS:
        raise ValueError(f"unknown convention {convention!r}; accepted: {', '.join(contract.CONVENTIONS)}")
    return convention == LAB_CONVENTION and scheme == FLASH_SCHEME


@cache
def derived_bytes(scheme: str, convention: str = CONSISTENT_CONVENTION) -> sp.Expr:
    """Total slow-memory bytes of a scheme, summed from its transfers and simplified."""
    if scheme not in TRANSFERS:
        raise ValueError(f"unknown scheme {scheme!r}; accepted: {', '.join(TRANSFERS)}")
    steps = TRANSFERS[scheme](counts_o_write(scheme, convention))
    return sp.factor(sp.simplify(sum(t.bytes for t in steps)))


def lab_forms() -> dict[str, sp.Expr]:
    """The lab's formulas exactly as written (12·N·d + 16·N²)·(b/4) and 8·N·d·(1 + N/B_r)·(b/4)."""
    return {
        NAIVE_SCHEME: (12 * N * d + 16 * N**2) * (dtype_bytes / 4),
        FLASH_SCHEME: 8 * N * d * (1 + N / B_r) * (dtype_bytes / 4),
    }


# The one FLOP count of the project: per head; `attention_flops` scales it to a batch of heads.
FLOPS = {
    "matmul": 4 * N**2 * d,  # Q K^T and P V, 2·N²·d each
    "matmul+softmax": 4 * N**2 * d + 5 * N**2,  # theory 02's count, softmax at 5 FLOPs per score
}


@cache
def numeric(expr: sp.Expr):
    return sp.lambdify((N, d, B_r, B_c, dtype_bytes), expr, "math")


def check_positive(**values) -> None:
    for name, value in values.items():
        if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{name} must be a positive number, got {value!r}")


def bytes_naive(N: int, d: int, dtype_bytes: int = 2) -> float:
    """Naive attention's HBM bytes, the lab's formula: (12·N·d + 16·N²)·(dtype_bytes/4), O write left out."""
    check_positive(N=N, d=d, dtype_bytes=dtype_bytes)
    return float(numeric(derived_bytes(NAIVE_SCHEME, LAB_CONVENTION))(N, d, 1, 1, dtype_bytes))


def bytes_flash(N: int, d: int, B_r: int, B_c: int, dtype_bytes: int = 2) -> float:
    """Flash attention's HBM bytes, the lab's formula: 8·N·d·(1 + N/B_r)·(dtype_bytes/4), O write counted."""
    check_positive(N=N, d=d, B_r=B_r, B_c=B_c, dtype_bytes=dtype_bytes)
    return float(numeric(derived_bytes(FLASH_SCHEME, LAB_CONVENTION))(N, d, B_r, B_c, dtype_bytes))


def model_bytes(
    scheme: str, N: int, d: int, B_r: int = LAB_TILE[0], B_c: int = LAB_TILE[1], dtype_bytes: int = 2,
    convention: str = CONSISTENT_CONVENTION,
) -> float:
    """Bytes of any scheme under either convention (see the module docstring)."""
    check_positive(N=N, d=d, B_r=B_r, B_c=B_c, dtype_bytes=dtype_bytes)
    return float(numeric(derived_bytes(scheme, convention))(N, d, B_r, B_c, dtype_bytes))


def model_bytes_by_direction(scheme: str, N: int, d: int, B_r: int = LAB_TILE[0], B_c: int = LAB_TILE[1],
                             dtype_bytes: int = 2) -> dict[str, float]:
    """Bytes read ("R") and written ("W") by a scheme, the write of O counted: the model beside a
    measurement that sees reads and writes apart (the GPU's DRAM counters)."""
    if scheme not in TRANSFERS:
        raise ValueError(f"unknown scheme {scheme!r}; accepted: {', '.join(TRANSFERS)}")
    check_positive(N=N, d=d, B_r=B_r, B_c=B_c, dtype_bytes=dtype_bytes)
    totals = {}
    for direction in ("R", "W"):
        expr = sum((t.bytes for t in TRANSFERS[scheme](True) if t.direction == direction), sp.Integer(0))
        totals[direction] = float(numeric(expr)(N, d, B_r, B_c, dtype_bytes))
    return totals


def compulsory_bytes(N: int, d: int, dtype_bytes: int = 2) -> float:
    """Q, K and V read once and O written once: the least any attention moves, 4·N·d·dtype_bytes."""
    check_positive(N=N, d=d, dtype_bytes=dtype_bytes)
    return float(4 * N * d * dtype_bytes)


def flops(N: int, d: int, variant: str = "matmul") -> float:
    """Attention FLOPs for one head: 4·N²·d ("matmul") or theory 02's 4·N²·d + 5·N² ("matmul+softmax")."""
    if variant not in FLOPS:
        raise ValueError(f"unknown FLOP count {variant!r}; accepted: {', '.join(FLOPS)}")
    return float(numeric(FLOPS[variant])(N, d, 1, 1, 1))


def attention_flops(B: int, H: int, N: int, d: int, causal: bool) -> float:
    """FLOPs of a batch of B·H heads: `flops` ("matmul", 4·N²·d) each, halved for causal (the
    convention of FlashAttention's benchmarks: half the scores are computed)."""
    total = B * H * flops(N, d)
    return total / 2 if causal else total


def intensity(scheme: str, N: int, d: int, B_r: int = LAB_TILE[0], B_c: int = LAB_TILE[1],
              dtype_bytes: int = 2, convention: str = CONSISTENT_CONVENTION,
              flop_variant: str = "matmul") -> float:
    """Arithmetic intensity in FLOP per slow-memory byte."""
    return flops(N, d, flop_variant) / model_bytes(scheme, N, d, B_r, B_c, dtype_bytes, convention)
