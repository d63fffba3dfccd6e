"""The results README's "Backward" section: why the backward recomputes S instead of storing it,
and at which N the recomputation pays, answered from the run's tables (`results_readme.collect`
puts `answers()` under the key `backward`).

The trade, per head, forward + backward (`symbolic/bytes.csv`'s rows of direction fwd+bwd, the
consistent convention, each tile of the table):
- bytes saved: the naive scheme's bytes (the forward stores P, N × N; the backward reads it back and
  materializes dP and dS) less the flash scheme's (FlashAttention-2's Algorithm 2 with the
  separate dQ pass this project's Triton backward runs: no N × N tensor, Q, K, V, dO re-read per
  tile);
- FLOPs added: the matmuls the flash backward runs beyond the naive one's four, 2·N²·d FLOPs each
  (the separate dQ pass: QKᵀ recomputed twice and dP once more, seven against four;
  `EXTRA_MATMULS`); the exponentials that recompute P run on the special-function units beside the
  matmuls and are not counted, as the roofline's peak is the matmul's.
On this machine's roofline (the GPU's measured ceilings on a GPU run, `timing.json`'s `ceilings`;
the CPU's, `cpu/roofline/ceilings.json`, otherwise) the saved bytes cost bytes / bandwidth and the
added FLOPs FLOPs / peak: the recomputation pays at the N where the first exceeds the second.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from minimodel.floor import contract
from minimodel.floor.byte_model.forward import DTYPE_BYTES

# Matmuls of one K/V × Q tile pair (N²·d-sized over a head), by backward variant: naive autograd's
# dV, dP, dQ, dK; flash: S recomputed, dV, dP, dK, dQ, and with the separate dQ pass S and dP again.
BACKWARD_MATMULS = {contract.NAIVE_SCHEME: 4, contract.DQ_READ_MODIFY_WRITE: 5, contract.DQ_SEPARATE_PASS: 7,
                    contract.DQ_IN_L2: 5}
FLASH_DQ = contract.DQ_SEPARATE_PASS  # the Triton backward's: a dK/dV kernel and a dQ kernel
EXTRA_MATMULS = BACKWARD_MATMULS[FLASH_DQ] - BACKWARD_MATMULS[contract.NAIVE_SCHEME]
# The implementations the kernel's backward is set beside (its time over theirs, geometric mean).
BESIDE = (contract.SDPA_FLASH, contract.SDPA_CUDNN, contract.FA4)


def _geomean(values: pd.Series) -> float | None:
    values = values.dropna()
    return float(np.exp(np.log(values).mean())) if len(values) else None


def recompute_trade(symbolic_table: pd.DataFrame, ceilings: dict, dtype: str, where: str) -> dict:
    """Per d, tile (B_r, B_c) and N: bytes saved, FLOPs added, each one's time on the roofline, and
    the first N from which the saved bytes' time exceeds the added FLOPs' at every larger N."""
    if "direction" not in symbolic_table.columns:
        return {"available": False, "why": "the symbolic table has no backward rows (a run made before "
                "the backward)"}
    rows = contract.with_direction(symbolic_table)
    rows = rows[(rows["direction"] == contract.FWD_BWD)
                & (rows["convention"] == contract.CONSISTENT_CONVENTION)]
    dtypes = list(dict.fromkeys(rows["dtype"]))
    dtype = dtype if dtype in dtypes else dtypes[0]
    rows = rows[rows["dtype"] == dtype]
    point = ["d", "B_r", "B_c", "N"]
    naive = rows[rows["scheme"] == contract.NAIVE_SCHEME].set_index(point)["bytes"]
    flash = rows[(rows["scheme"] == contract.FLASH_SCHEME)
                 & (rows["dq_accumulation"] == FLASH_DQ)].set_index(point)["bytes"]
    trade = pd.DataFrame({"naive_bytes": naive, "flash_bytes": flash}).dropna().reset_index()
    if trade.empty:
        return {"available": False, "why": "the symbolic table has no forward + backward rows of both "
                f"naive and flash (dQ {FLASH_DQ}) in {dtype}"}
    peak, bandwidth = ceilings["peak_flops_per_s"], ceilings["bandwidth_bytes_per_s"]
    trade["saved_bytes"] = trade["naive_bytes"] - trade["flash_bytes"]
    trade["extra_flops"] = EXTRA_MATMULS * 2.0 * trade["N"] ** 2 * trade["d"]
    trade["saved_s"] = trade["saved_bytes"] / bandwidth
    trade["extra_s"] = trade["extra_flops"] / peak
    trade["pays"] = trade["saved_s"] > trade["extra_s"]
    per_d = []
    for (d, block_r, block_c), g in trade.groupby(["d", "B_r", "B_c"]):
        g = g.sort_values("N")
        losing = g[~g["pays"]]
        after = g[g["N"] > losing["N"].max()] if len(losing) else g
        largest = g.iloc[-1]
        per_d.append({"d": int(d), "B_r": int(block_r), "B_c": int(block_c),
                      "pays_from_n": int(after["N"].min()) if len(after) else None,
                      "n_min": int(g["N"].min()), "n_max": int(largest["N"]),
                      "largest": largest.to_dict(),
                      "saved_over_extra_time": float(largest["saved_s"] / largest["extra_s"]),
                      # the N x N P per head that the naive backward needs kept from the forward
                      "p_bytes": float(largest["N"] ** 2 * DTYPE_BYTES[dtype])})
    return {"available": True, "where": where, "dtype": dtype,
            "peak_tflops": peak / 1e12, "bandwidth_gbs": bandwidth / 1e9,
            "machine_balance": peak / bandwidth, "extra_matmuls": EXTRA_MATMULS,
            "matmuls": BACKWARD_MATMULS, "per_d": per_d}


def backward_timing(timing: dict, rows: pd.DataFrame) -> dict:
    """The kernel's backward TFLOP/s on FlashAttention's grid, and its speed over SDPA flash (FA2),
    cuDNN and FA4 (their GPU time over the kernel's, geometric mean over the points both timed);
    or why there is none."""
    if timing.get("device") is None:
        return {"timed": False, "why": timing.get("status", contract.NO_GPU_TIMING)}
    if "direction" not in rows.columns or not (rows["direction"] == contract.BACKWARD).any():
        return {"timed": False, "why": "this run timed no backward (gpu/timing/timing.csv has no rows of "
                "direction backward)"}
    rows = rows[(rows["direction"] == contract.BACKWARD) & (rows["grid"] == contract.FLASHATTENTION_GRID)
                & (rows["status"] == contract.OK)]
    ms = rows.pivot_table(index=["d", "N", "causal"], columns="impl", values="ms", aggfunc="first")
    kernel = rows[rows["impl"] == contract.TRITON]
    if kernel.empty:
        return {"timed": False, "why": "the kernel's backward has no timed point on FlashAttention's grid"}
    beside = [{"impl": impl, "kernel_over_this": _geomean(ms[impl] / ms[contract.TRITON]),
               "points": int((ms[impl] / ms[contract.TRITON]).notna().sum())}
              if impl in ms else {"impl": impl, "kernel_over_this": None, "points": 0} for impl in BESIDE]
    return {"timed": True, "device": timing["device"], "points": len(kernel),
            "kernel_tflops_max": float(kernel["tflops"].max()),
            "kernel_tflops_min": float(kernel["tflops"].min()),
            "kernel_tflops_geomean": _geomean(kernel["tflops"]), "beside": beside}


def answers(symbolic_table: pd.DataFrame, cpu_ceilings: dict, timing: dict, timing_rows: pd.DataFrame,
            ) -> dict:
    """The Backward section's numbers: the trade on the GPU's roofline on a GPU run (fp16), on the
    CPU's otherwise (fp32, the CPU roofline's dtype), and the backward's timing where there is one."""
    gpu = timing.get("ceilings") if timing.get("device") is not None else None
    trade = (recompute_trade(symbolic_table, gpu, contract.LAB_DTYPE, timing["device"]) if gpu else
             recompute_trade(symbolic_table, cpu_ceilings, "float32", cpu_ceilings["device"]))
    return {"trade": trade, "timing": backward_timing(timing, timing_rows)}
