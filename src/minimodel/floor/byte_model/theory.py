"""Theory 02's four practice problems, computed from the byte model (`forward`): the bytes of one
problem, the largest tiles that fit on chip, the key tiles of a sliding window, and the FLOPs of
the online rescale at B_c = 1. A run's README states them (`report.results_readme`).
"""

from __future__ import annotations

from minimodel.floor.byte_model.forward import bytes_flash, bytes_naive, flops, model_bytes
from minimodel.floor.contract import FLASH_SCHEME, LAB_TILE, NAIVE_FP32_SOFTMAX_SCHEME, NAIVE_SCHEME

# Theory 02's problem 2: the shared memory one H100 block may use, as the theory states it
THEORY_H100_SHARED_BYTES = 228 * 1024


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
        "naive_fp32_softmax_bytes": model_bytes(NAIVE_FP32_SOFTMAX_SCHEME, n, hd, b_r, b_c, 2),
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
