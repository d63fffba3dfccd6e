"""Stage 1: the byte model's tables (notes/labs.md: lab 01 A and B, theory 02), from the closed
forms of `minimodel.byte_model`: the tidy table of bytes, FLOPs and intensity of the forward
(`byte_table`; the backward's rows: `symbolic_backward`), every derived closed form beside the
lab's (`formulas_table`), and the lab's printed table (`lab_table`, `format_lab_table`).

Run `python -m minimodel.symbolic` to print the lab's table (L1 and L2 sizes from the config).
"""

from __future__ import annotations

import pandas as pd
import sympy as sp

from minimodel import contract
from minimodel.byte_model.forward import (
    DTYPE_BYTES,
    SCHEMES,
    counts_o_write,
    derived_bytes,
    flops,
    lab_forms,
    model_bytes,
)

# The closed forms other stages read, importable from here too until they import minimodel.byte_model
# (and, with these, DTYPE_BYTES, SCHEMES, flops and model_bytes above)
from minimodel.byte_model.forward import attention_flops as attention_flops
from minimodel.byte_model.forward import bytes_flash as bytes_flash
from minimodel.byte_model.forward import bytes_naive as bytes_naive
from minimodel.byte_model.forward import compulsory_bytes as compulsory_bytes
from minimodel.byte_model.forward import intensity as intensity
from minimodel.byte_model.forward import model_bytes_by_direction as model_bytes_by_direction
from minimodel.byte_model.theory import practice_problems as practice_problems
from minimodel.contract import (
    CONSISTENT_CONVENTION,
    FLASH_SCHEME,
    LAB_CONVENTION,
    LAB_TILE,
    NAIVE_FP32_SOFTMAX_SCHEME,
    NAIVE_SCHEME,
)
from minimodel.provenance.configcheck import load_config

MiB = 2**20


def byte_table(n_values, head_dims, tiles, dtypes, schemes=(NAIVE_SCHEME, FLASH_SCHEME),
               conventions=contract.CONVENTIONS) -> pd.DataFrame:
    """Tidy table of the forward (`direction` = forward): one row per scheme × convention × N × d ×
    tile × dtype. The backward's rows: `symbolic_backward.byte_table`."""
    rows = []
    for scheme in schemes:
        for convention in conventions:
            for dtype in dtypes:
                if scheme == NAIVE_FP32_SOFTMAX_SCHEME and DTYPE_BYTES[dtype] != 2:
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


def format_lab_table(table: pd.DataFrame) -> str:
    header = (
        "Lab 01, blocks A-B: HBM bytes per head (MiB), FLOPs = 4·N²·d, intensity in FLOP/byte.\n"
        f"{LAB_CONVENTION} = the lab's formulas (naive without the O write, flash with it); "
        "consistent = O write left out of both.\n\n"
    )
    return header + table.to_string(index=False, float_format=lambda x: f"{x:,.2f}") + "\n"


if __name__ == "__main__":
    cfg = load_config()["symbolic"]  # as a command only: a stage passes the config
    print(format_lab_table(lab_table(l1_bytes=cfg["l1_bytes"], l2_bytes=cfg["l2_bytes"])))
