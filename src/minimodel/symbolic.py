"""Stage 1: the byte model's tables (notes/labs.md: lab 01 A and B, theory 02; notes/backward.md),
from the closed forms of `minimodel.floor.byte_model`: the tidy table of bytes, FLOPs and intensity in
every pass (`byte_table`, the pass a parameter; all of them: `tidy_table`), every derived closed
form (`formulas_table`; the forward's beside the lab's), the lab's printed table (`lab_table`,
`format_lab_table`), and decode's rows and closed forms (`decode_table`, `decode_formulas_table`).
It writes tables only: the other stages read the closed forms from
`minimodel.floor.byte_model`.

Run `python -m minimodel.symbolic` to print the lab's table (L1 and L2 sizes from the config).
"""

from __future__ import annotations

import pandas as pd
import sympy as sp

from minimodel.floor import contract, decode_grid
from minimodel.floor.byte_model import backward, decode
from minimodel.floor.byte_model.forward import (
    DTYPE_BYTES,
    SCHEMES,
    counts_o_write,
    derived_bytes,
    flops,
    lab_forms,
    model_bytes,
)
from minimodel.floor.contract import (
    CONSISTENT_CONVENTION,
    FLASH_SCHEME,
    LAB_CONVENTION,
    LAB_TILE,
    NAIVE_FP32_SOFTMAX_SCHEME,
    NAIVE_SCHEME,
)
from minimodel.floor.provenance.configcheck import load_config

MiB = 2**20


def tidy_table(n_values, head_dims, tiles, dtypes) -> pd.DataFrame:
    """The stage's tidy table (`contract.SYMBOLIC_BYTES`): the forward's rows of every scheme, then
    the backward's and forward + backward's (`byte_table` in each pass)."""
    return pd.concat([byte_table(n_values, head_dims, tiles, dtypes, schemes=SCHEMES)]
                     + [byte_table(n_values, head_dims, tiles, dtypes, direction)
                        for direction in backward.BACKWARD_DIRECTIONS], ignore_index=True)


def byte_table(n_values, head_dims, tiles, dtypes, direction: str = contract.FORWARD,
               schemes=(NAIVE_SCHEME, FLASH_SCHEME), conventions=contract.CONVENTIONS) -> pd.DataFrame:
    """Tidy table of one pass (`direction`). The forward's: one row per scheme × convention × N × d
    × tile × dtype. A backward pass's (the backward alone, forward + backward): one row per scheme
    and dQ accumulation (`byte_model.backward.variants`) × N × d × tile × dtype, the consistent
    convention, with `dq_accumulation`; FLOPs with the softmax's left empty (the benchmarks'
    convention counts matmuls only)."""
    if direction != contract.FORWARD:
        return _backward_table(n_values, head_dims, tiles, dtypes, direction)
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


def _backward_table(n_values, head_dims, tiles, dtypes, direction: str) -> pd.DataFrame:
    rows = []
    for scheme, dq in backward.variants():
        for dtype in dtypes:
            for n in n_values:
                for hd in head_dims:
                    for br, bc in tiles:
                        b = backward.model_bytes(scheme, n, hd, br, bc, DTYPE_BYTES[dtype], direction, dq)
                        f = backward.flops(n, hd, direction)
                        rows.append({
                            "scheme": scheme, "direction": direction,
                            "convention": contract.CONSISTENT_CONVENTION, "N": n, "d": hd,
                            "B_r": br, "B_c": bc, "dtype": dtype, "bytes": b, "flops": f,
                            "flops_with_softmax": float("nan"), "intensity": f / b,
                            "intensity_with_softmax": float("nan"), "dq_accumulation": dq,
                        })
    return pd.DataFrame(rows)


def formulas_table(direction: str = contract.FORWARD) -> pd.DataFrame:
    """Every derived closed form of one pass, as text, for the results folder: the forward's beside
    the lab's (`contract.SYMBOLIC_FORMULAS`); a backward pass's per scheme and dQ accumulation
    (`contract.SYMBOLIC_BACKWARD_FORMULAS` holds both backward passes)."""
    if direction != contract.FORWARD:
        return pd.DataFrame([
            {"scheme": scheme, "direction": direction, "dq_accumulation": dq,
             "convention": contract.CONSISTENT_CONVENTION,
             "bytes": str(backward.derived_bytes(scheme, direction, dq))}
            for scheme, dq in backward.variants()])
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


def backward_formulas_table() -> pd.DataFrame:
    """`contract.SYMBOLIC_BACKWARD_FORMULAS`: `formulas_table` of the backward alone, then of
    forward + backward."""
    return pd.concat([formulas_table(direction) for direction in backward.BACKWARD_DIRECTIONS],
                     ignore_index=True)


def decode_table(cfg: dict) -> pd.DataFrame:
    """Decode's model rows (`contract.DECODE_SYMBOLIC`), one per point of the config's `decode` grid
    (`floor.decode_grid.points`, the KV-cache cap applied) and scheme: the naive decode, the split-KV
    decode with one split, and with the splits the policy picks on `cfg["sm_count"]` SMs where
    that is more than one. Bytes (read and written), the K and V caches' share, FLOPs, intensity,
    and the least time at `cfg["bandwidth_bytes_per_s"]` (bytes ÷ bandwidth) in microseconds."""
    rows = []
    for point in decode_grid.points(cfg, cfg["max_cache_bytes"]):
        lengths = point.cache_seqlens
        policy = decode_grid.split_policy(point.batch, point.heads_kv, max(lengths), cfg["sm_count"])
        shape = (point.batch, point.heads_q, point.heads_kv, point.len_q, lengths, point.head_dim,
                 point.dtype_bytes)
        f = decode.flops(point.heads_q, point.len_q, lengths, point.head_dim)
        for scheme, splits in ((contract.NAIVE_SCHEME, 1), (contract.SPLIT_KV_SCHEME, 1),
                               *(((contract.SPLIT_KV_SCHEME, policy),) if policy > 1 else ())):
            rw = decode.bytes_by_rw(scheme, *shape, splits)
            total = rw["R"] + rw["W"]
            rows.append({**point.row(), "scheme": scheme, "splits": splits, "bytes": total,
                         "bytes_read": rw["R"], "bytes_written": rw["W"],
                         "kv_cache_bytes": 2 * sum(lengths) * point.heads_kv * point.head_dim
                         * point.dtype_bytes,
                         "flops": f, "intensity": f / total,
                         "bound_us": decode.bound_seconds(total, cfg["bandwidth_bytes_per_s"]) * 1e6})
    return pd.DataFrame(rows)


def decode_formulas_table() -> pd.DataFrame:
    """Decode's closed forms, as text (`contract.DECODE_FORMULAS`): each scheme with and without its
    optional step (the naive mask's pass when L_q > 1, the split-KV combine when S > 1)."""
    cases = {contract.NAIVE_SCHEME: ("L_q = 1", "L_q > 1: the mask's pass over S"),
             contract.SPLIT_KV_SCHEME: ("S = 1: O written by the split kernel", "S > 1: partials, combine")}
    return pd.DataFrame([{"scheme": scheme, "case": case,
                          "bytes": str(decode.derived_bytes(scheme, optional))}
                         for scheme in decode.SCHEMES
                         for optional, case in zip((False, True), cases[scheme], strict=True)])


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
