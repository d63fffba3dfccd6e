"""The roofline's arithmetic, shared by the stages that place attention on a machine's ceilings
(notes/labs.md, lab 01 E): the CPU stage on its measured ceilings, the GPU stage on the device's.

`predict_speedup` places naive and flash attention on a roofline by their model intensity
(`minimodel.floor.byte_model`): attainable = min(peak, intensity × bandwidth), and the predicted speedup
is the ratio of the two attainable rates (the FLOPs being equal, time falls as the attainable
rate rises).
"""

from __future__ import annotations

from minimodel.floor import contract
from minimodel.floor.byte_model.forward import DTYPE_BYTES, intensity


def attainable(intensity: float, peak: float, bandwidth: float) -> float:
    """The roofline: min(peak, intensity × bandwidth)."""
    return min(peak, intensity * bandwidth)


def predict_speedup(ceilings: dict, n: int = 2048, d: int = 64, B_r: int = contract.LAB_TILE[0],
                    B_c: int = contract.LAB_TILE[1], dtype: str = "float32") -> dict:
    """Flash over naive speedup the roofline predicts at (n, d), consistent convention."""
    peak = ceilings["peak_flops_per_s"]
    bw = ceilings["bandwidth_bytes_per_s"]
    b = DTYPE_BYTES[dtype]
    out = {"N": n, "d": d, "B_r": B_r, "B_c": B_c, "dtype": dtype,
           "convention": f"{contract.CONSISTENT_CONVENTION} (O write left out)"}
    for scheme in contract.BYTES_SCHEMES:
        i = intensity(scheme, n, d, B_r, B_c, b, contract.CONSISTENT_CONVENTION)
        out[f"intensity_{scheme}"] = i
        out[f"attainable_{scheme}_flops_per_s"] = attainable(i, peak, bw)
        out[f"bound_{scheme}"] = "memory" if i * bw < peak else "compute"
    out["predicted_speedup"] = (out["attainable_flash_flops_per_s"]
                                / out["attainable_naive_flops_per_s"])
    return out
