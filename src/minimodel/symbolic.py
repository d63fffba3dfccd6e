"""The closed-form byte model of naive and flash attention (notes/labs.md: lab 01 A and B, theory 02).

The closed forms are not typed in: they are summed with sympy from a per-step list of the
reads and writes that cross the slow-memory boundary (HBM on a GPU), one list per scheme,
exactly as theory 02 accounts for them. `lab_forms()` holds the lab's formulas as written;
tests check that the derived sums equal them.

Two conventions for the write of O (both schemes write O once), named in `contract.CONVENTIONS`:
- the lab's (`contract.LAB_CONVENTION`): its formulas as written. The naive one leaves the write
  of O out, the flash one counts it, so they are not quite comparable.
- `contract.CONSISTENT_CONVENTION`: the write of O is left out of both. Every measured comparison in this
  project (the CPU byte counts of stage 2, the plots) uses this one.

Per element, the lab charges `dtype_bytes` for every tensor. `naive_fp32_softmax` is the
accounting of a half-precision naive attention computed the way PyTorch does it for
stability: S is upcast to fp32, the softmax runs in fp32, P is cast back (theory 02:
"closer to ~24 N^2").

Run `python -m minimodel.symbolic` to print the lab's table (L1 and L2 sizes from the config).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import pandas as pd
import sympy as sp

from minimodel import contract
from minimodel.contract import CONSISTENT_CONVENTION, FLASH_SCHEME, LAB_CONVENTION, LAB_TILE, NAIVE_SCHEME

N, d, B_r, B_c, dtype_bytes = sp.symbols("N d B_r B_c dtype_bytes", positive=True)

# the lab's tile (LAB_TILE) is every default tile here
SCHEMES = (NAIVE_SCHEME, "naive_fp32_softmax", FLASH_SCHEME)
# Bytes per element of each dtype the project accepts, by its name (the torch attribute's name).
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
MiB = 2**20
# Theory 02's problem 2: the shared memory one H100 block may use, as the theory states it
THEORY_H100_SHARED_BYTES = 228 * 1024


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
    "naive_fp32_softmax": naive_fp32_softmax_transfers,
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
def _numeric(expr: sp.Expr):
    return sp.lambdify((N, d, B_r, B_c, dtype_bytes), expr, "math")


def _check_positive(**values) -> None:
    for name, value in values.items():
        if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{name} must be a positive number, got {value!r}")


def bytes_naive(N: int, d: int, dtype_bytes: int = 2) -> float:
    """Naive attention's HBM bytes, the lab's formula: (12·N·d + 16·N²)·(dtype_bytes/4), O write left out."""
    _check_positive(N=N, d=d, dtype_bytes=dtype_bytes)
    return float(_numeric(derived_bytes(NAIVE_SCHEME, LAB_CONVENTION))(N, d, 1, 1, dtype_bytes))


def bytes_flash(N: int, d: int, B_r: int, B_c: int, dtype_bytes: int = 2) -> float:
    """Flash attention's HBM bytes, the lab's formula: 8·N·d·(1 + N/B_r)·(dtype_bytes/4), O write counted."""
    _check_positive(N=N, d=d, B_r=B_r, B_c=B_c, dtype_bytes=dtype_bytes)
    return float(_numeric(derived_bytes(FLASH_SCHEME, LAB_CONVENTION))(N, d, B_r, B_c, dtype_bytes))


def model_bytes(
    scheme: str, N: int, d: int, B_r: int = LAB_TILE[0], B_c: int = LAB_TILE[1], dtype_bytes: int = 2,
    convention: str = CONSISTENT_CONVENTION,
) -> float:
    """Bytes of any scheme under either convention (see the module docstring)."""
    _check_positive(N=N, d=d, B_r=B_r, B_c=B_c, dtype_bytes=dtype_bytes)
    return float(_numeric(derived_bytes(scheme, convention))(N, d, B_r, B_c, dtype_bytes))


def model_bytes_by_direction(scheme: str, N: int, d: int, B_r: int = LAB_TILE[0], B_c: int = LAB_TILE[1],
                             dtype_bytes: int = 2) -> dict[str, float]:
    """Bytes read ("R") and written ("W") by a scheme, the write of O counted: the model beside a
    measurement that sees reads and writes apart (the GPU's DRAM counters)."""
    if scheme not in TRANSFERS:
        raise ValueError(f"unknown scheme {scheme!r}; accepted: {', '.join(TRANSFERS)}")
    _check_positive(N=N, d=d, B_r=B_r, B_c=B_c, dtype_bytes=dtype_bytes)
    totals = {}
    for direction in ("R", "W"):
        expr = sum((t.bytes for t in TRANSFERS[scheme](True) if t.direction == direction), sp.Integer(0))
        totals[direction] = float(_numeric(expr)(N, d, B_r, B_c, dtype_bytes))
    return totals


def compulsory_bytes(N: int, d: int, dtype_bytes: int = 2) -> float:
    """Q, K and V read once and O written once: the least any attention moves, 4·N·d·dtype_bytes."""
    _check_positive(N=N, d=d, dtype_bytes=dtype_bytes)
    return float(4 * N * d * dtype_bytes)


def flops(N: int, d: int, variant: str = "matmul") -> float:
    """Attention FLOPs for one head: 4·N²·d ("matmul") or theory 02's 4·N²·d + 5·N² ("matmul+softmax")."""
    if variant not in FLOPS:
        raise ValueError(f"unknown FLOP count {variant!r}; accepted: {', '.join(FLOPS)}")
    return float(_numeric(FLOPS[variant])(N, d, 1, 1, 1))


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


def byte_table(n_values, head_dims, tiles, dtypes, schemes=(NAIVE_SCHEME, FLASH_SCHEME),
               conventions=contract.CONVENTIONS) -> pd.DataFrame:
    """Tidy table of the forward (`direction` = forward): one row per scheme × convention × N × d ×
    tile × dtype. The backward's rows: `symbolic_backward.byte_table`."""
    rows = []
    for scheme in schemes:
        for convention in conventions:
            for dtype in dtypes:
                if scheme == "naive_fp32_softmax" and DTYPE_BYTES[dtype] != 2:
                    continue
                for n in n_values:
                    for hd in head_dims:
                        for br, bc in tiles:
                            b = model_bytes(scheme, n, hd, br, bc, DTYPE_BYTES[dtype], convention)
                            rows.append({
                                "scheme": scheme, "direction": contract.FORWARD,
                                "convention": convention, "N": n, "d": hd,
                                "B_r": br, "B_c": bc, "dtype": dtype, "bytes": b,
                                "flops": flops(n, hd, "matmul"),
                                "flops_with_softmax": flops(n, hd, "matmul+softmax"),
                                "intensity": flops(n, hd, "matmul") / b,
                                "intensity_with_softmax": flops(n, hd, "matmul+softmax") / b,
                            })
    return pd.DataFrame(rows)


def formulas_table() -> pd.DataFrame:
    """Every derived closed form beside the lab's, as text, for the results folder."""
    lab = lab_forms()
    rows = []
    for scheme in SCHEMES:
        for convention in contract.CONVENTIONS:
            expr = derived_bytes(scheme, convention)
            rows.append({
                "scheme": scheme, "convention": convention,
                "counts_o_write": counts_o_write(scheme, convention),
                "bytes": str(expr),
                "equals_lab_formula": (
                    bool(sp.simplify(expr - lab[scheme]) == 0) if scheme in lab else None
                ),
            })
    return pd.DataFrame(rows)


def lab_table(grid=contract.LAB_TABLE_POINTS, B_r_: int = LAB_TILE[0], B_c_: int = LAB_TILE[1],
              dtype: str = contract.LAB_DTYPE, *, l1_bytes: int, l2_bytes: int) -> pd.DataFrame:
    """The lab's printed table (lab 01 A and B) with its annotations; `l1_bytes` and `l2_bytes`
    are the config's (symbolic.l1_bytes, symbolic.l2_bytes), the sizes the model assumes.

    `score_matrix_fp32` is the size of one materialized N×N fp32 matrix: where it fits in L1
    the naive scheme never really leaves the chip, and flash gains nothing; flash only pays
    once N·N·dtype no longer fits in L2.
    """
    b = DTYPE_BYTES[dtype]
    rows = []
    for n, hd in grid:
        naive = model_bytes(NAIVE_SCHEME, n, hd, B_r_, B_c_, b, LAB_CONVENTION)
        flash = model_bytes(FLASH_SCHEME, n, hd, B_r_, B_c_, b, LAB_CONVENTION)
        naive_c = model_bytes(NAIVE_SCHEME, n, hd, B_r_, B_c_, b, CONSISTENT_CONVENTION)
        flash_c = model_bytes(FLASH_SCHEME, n, hd, B_r_, B_c_, b, CONSISTENT_CONVENTION)
        score = 4 * n * n
        if score <= l1_bytes:
            note = f"N² fp32 = {score / 1024:.0f} KiB fits in L1: flash gains nothing"
        elif n * n * b <= l2_bytes:
            note = f"N²·{b} B = {n * n * b / MiB:.2f} MiB fits in L2: little to gain"
        else:
            note = f"N²·{b} B = {n * n * b / MiB:.0f} MiB exceeds L2: flash wins"
        rows.append({
            "N": n, "d": hd, "dtype": dtype,
            "naive_MiB_lab": naive / MiB, "flash_MiB_lab": flash / MiB,
            "naive_MiB_consistent": naive_c / MiB, "flash_MiB_consistent": flash_c / MiB,
            "naive_over_flash_consistent": naive_c / flash_c,
            "intensity_naive": flops(n, hd) / naive_c, "intensity_flash": flops(n, hd) / flash_c,
            "note": note,
        })
    return pd.DataFrame(rows)


def sram_tile_bytes(B_r: int, B_c: int, d: int, dtype_bytes: int = 2, score_bytes: int = 4) -> int:
    """On-chip bytes of one step's tiles: Q (B_r×d), K and V (B_c×d) in the input dtype, S in fp32."""
    return (B_r + 2 * B_c) * d * dtype_bytes + B_r * B_c * score_bytes


def largest_tiles(d: int = 128, sram_bytes: int = THEORY_H100_SHARED_BYTES, dtype_bytes: int = 2,
                  score_bytes: int = 4, step: int = 16, limit: int = 1024) -> dict:
    """Theory 02, problem 2: the largest B_r × B_c whose Q, K, V and S tiles fit on chip.

    Searches multiples of `step` (tensor-core tiles are multiples of 16) and powers of two.
    """
    def best(sizes):
        fits = [(br * bc, br, bc) for br in sizes for bc in sizes
                if sram_tile_bytes(br, bc, d, dtype_bytes, score_bytes) <= sram_bytes]
        area, br, bc = max(fits, key=lambda t: (t[0], -abs(t[1] - t[2])))
        return {"B_r": br, "B_c": bc, "area": area,
                "bytes": sram_tile_bytes(br, bc, d, dtype_bytes, score_bytes)}

    powers = [2**k for k in range(4, limit.bit_length()) if 2**k <= limit]
    return {"d": d, "sram_bytes": sram_bytes, "multiples_of": step,
            "best": best(range(step, limit + 1, step)), "best_power_of_two": best(powers)}


def window_kv_tiles(W: int, B_r: int = LAB_TILE[0], B_c: int = LAB_TILE[1]) -> int:
    """Theory 02, problem 3: K/V tiles a query tile reads under a sliding window of W keys.

    Query rows [i0, i0 + B_r) see keys (i - W, i]: the keys [i0 - W + 1, i0 + B_r - 1],
    counted in whole B_c tiles for a query tile far from the start (i0 a multiple of B_r·B_c).
    """
    i0 = B_r * B_c * (W // B_c + 2)
    return (i0 + B_r - 1) // B_c - (i0 - W + 1) // B_c + 1


def rescale_flops(N: int, d: int, B_c: int) -> float:
    """Non-matmul FLOPs of the online rescale acc *= alpha: B_r·d per inner step, N/B_c steps per
    query tile, N/B_r query tiles: N²·d / B_c in all (theory 02, problem 4)."""
    return N * N * d / B_c


def practice_problems() -> dict:
    """Theory 02's four practice problems, computed."""
    n, hd = 8192, 128
    b_r, b_c = LAB_TILE
    p1 = {
        "N": n, "d": hd, "B_r": b_r, "B_c": b_c, "dtype": "float16",
        "flash_bytes_lab": bytes_flash(n, hd, b_r, b_c, 2),
        "naive_bytes_lab": bytes_naive(n, hd, 2),
        "flash_bytes_consistent": model_bytes(FLASH_SCHEME, n, hd, b_r, b_c, 2),
        "naive_bytes_consistent": model_bytes(NAIVE_SCHEME, n, hd, b_r, b_c, 2),
        "naive_fp32_softmax_bytes": model_bytes("naive_fp32_softmax", n, hd, b_r, b_c, 2),
    }
    p1["speedup_from_bytes_consistent"] = p1["naive_bytes_consistent"] / p1["flash_bytes_consistent"]
    p1["speedup_from_bytes_fp32_softmax"] = p1["naive_fp32_softmax_bytes"] / p1["flash_bytes_consistent"]
    window = 512
    dense_tiles = n // b_c
    p3 = {"N": n, "W": window, "B_r": b_r, "B_c": b_c, "kv_tiles_per_q_tile": window_kv_tiles(window),
          "dense_kv_tiles_per_q_tile": dense_tiles, "causal_dense_mean": (dense_tiles + 1) / 2}
    p4 = {"N": n, "d": hd, "matmul_flops": flops(n, hd),
          f"rescale_flops_B_c_{b_c}": rescale_flops(n, hd, b_c),
          "rescale_flops_B_c_1": rescale_flops(n, hd, 1),
          "inner_steps_per_q_tile_B_c_1": n}
    return {"p1_flash_bytes": p1, "p2_largest_tiles": largest_tiles(128, THEORY_H100_SHARED_BYTES),
            "p3_sliding_window": p3, "p4_B_c_to_1": p4}


def format_lab_table(table: pd.DataFrame) -> str:
    header = (
        "Lab 01, blocks A-B: HBM bytes per head (MiB), FLOPs = 4·N²·d, intensity in FLOP/byte.\n"
        f"{LAB_CONVENTION} = the lab's formulas (naive without the O write, flash with it); "
        "consistent = O write left out of both.\n\n"
    )
    return header + table.to_string(index=False, float_format=lambda x: f"{x:,.2f}") + "\n"


if __name__ == "__main__":
    from minimodel.provenance.configcheck import load_config  # as a command only: a stage passes the config

    cfg = load_config()["symbolic"]
    print(format_lab_table(lab_table(l1_bytes=cfg["l1_bytes"], l2_bytes=cfg["l2_bytes"])))
