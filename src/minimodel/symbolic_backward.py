"""Stage 1: the backward's tables, from the backward's closed forms
(`minimodel.byte_model.backward`, notes/backward.md): its rows of the tidy table, the backward
alone and forward + backward (`byte_table`), and its closed forms as text (`formulas_table`).
"""

from __future__ import annotations

import pandas as pd

from minimodel import contract
from minimodel.byte_model.backward import BACKWARD_DIRECTIONS, derived_bytes, flops, model_bytes, variants

# The closed forms other stages read, importable from here too until they import minimodel.byte_model
# (and, with these, derived_bytes, flops, model_bytes and variants above)
from minimodel.byte_model.backward import attention_flops as attention_flops
from minimodel.byte_model.backward import bytes_by_rw as bytes_by_rw
from minimodel.byte_model.backward import naive_backward_transfers as naive_backward_transfers
from minimodel.byte_model.forward import DTYPE_BYTES


def byte_table(n_values, head_dims, tiles, dtypes) -> pd.DataFrame:
    """Tidy table of the backward and forward + backward rows, the forward's columns plus
    `direction` and `dq_accumulation`; FLOPs with the softmax's are left empty (the benchmarks'
    convention counts matmuls only)."""
    rows = []
    for direction in BACKWARD_DIRECTIONS:
        for scheme, dq in variants():
            for dtype in dtypes:
                for n in n_values:
                    for hd in head_dims:
                        for br, bc in tiles:
                            b = model_bytes(scheme, n, hd, br, bc, DTYPE_BYTES[dtype], direction, dq)
                            f = flops(n, hd, direction)
                            rows.append({
                                "scheme": scheme, "direction": direction,
                                "convention": contract.CONSISTENT_CONVENTION, "N": n, "d": hd,
                                "B_r": br, "B_c": bc, "dtype": dtype, "bytes": b, "flops": f,
                                "flops_with_softmax": float("nan"), "intensity": f / b,
                                "intensity_with_softmax": float("nan"), "dq_accumulation": dq,
                            })
    return pd.DataFrame(rows)


def formulas_table() -> pd.DataFrame:
    """Every backward closed form, as text."""
    return pd.DataFrame([
        {"scheme": scheme, "direction": direction, "dq_accumulation": dq,
         "convention": contract.CONSISTENT_CONVENTION, "bytes": str(derived_bytes(scheme, direction, dq))}
        for direction in BACKWARD_DIRECTIONS for scheme, dq in variants()])
