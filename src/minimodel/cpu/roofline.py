"""This machine's roofline ceilings and the flash speedup they predict (notes/labs.md, lab 01 E).

`measure_ceilings` times a large fp32 matmul (peak FLOP/s) and a large copy (bandwidth,
counting the bytes read plus the bytes written), several repeats each, and keeps the median;
`minimodel.floor.roofline_model.predict_speedup` places naive and flash attention on those ceilings.
`time_references` times the CPU references themselves.
"""

from __future__ import annotations

import statistics
import time

import torch

from minimodel.cpu.references import attn_flash_reference_cpu
from minimodel.floor.attention_ref import attn_naive
from minimodel.floor.byte_model.forward import flops, intensity
from minimodel.floor.contract import FLASH_SCHEME, LAB_TILE, NAIVE_SCHEME


def _median_seconds(fn, repeats: int) -> tuple[float, list[float]]:
    fn()  # warm-up: first-touch page faults and thread-pool start stay out of the numbers
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def matmul_flops(n: int = 2048, repeats: int = 7, dtype=torch.float32, device="cpu") -> dict:
    """Median FLOP/s of an n×n by n×n matmul (2·n³ FLOPs) on random inputs."""
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)
    c = torch.empty(n, n, dtype=dtype, device=device)
    seconds, times = _median_seconds(lambda: torch.mm(a, b, out=c), repeats)
    return {"flops_per_s": 2 * n**3 / seconds, "n": n, "dtype": str(dtype).removeprefix("torch."),
            "median_s": seconds, "times_s": times}


def copy_bandwidth(mib: int = 256, repeats: int = 7, device="cpu") -> dict:
    """Median bytes/s of copying a `mib` MiB buffer, counting bytes read plus bytes written."""
    n = mib * 2**20 // 4
    src = torch.randn(n, device=device)
    dst = torch.empty_like(src)
    seconds, times = _median_seconds(lambda: dst.copy_(src), repeats)
    return {"bytes_per_s": 2 * n * 4 / seconds, "mib": mib, "median_s": seconds, "times_s": times}


def memory_needed(matmul_n: int, copy_mib: int, predict_n: int) -> dict[str, int]:
    """Bytes each measurement allocates, by the config key that sets its size."""
    return {
        "roofline.matmul_n": 3 * matmul_n**2 * 4,  # a, b and c in fp32
        "roofline.copy_mib": 2 * copy_mib * 2**20,  # source and destination
        "roofline.predict_at": 3 * predict_n**2 * 4,  # the naive reference's S, P and a temporary
    }


def measure_ceilings(matmul_n: int = 2048, copy_mib: int = 256, repeats: int = 7) -> dict:
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    mm = matmul_flops(matmul_n, repeats)
    bw = copy_bandwidth(copy_mib, repeats)
    return {
        "peak_flops_per_s": mm["flops_per_s"],
        "bandwidth_bytes_per_s": bw["bytes_per_s"],
        "ridge_intensity": mm["flops_per_s"] / bw["bytes_per_s"],
        "torch_threads": torch.get_num_threads(),
        "matmul": mm,
        "copy": bw,
    }


def time_references(n: int = 2048, d: int = 64, B_r: int = LAB_TILE[0], B_c: int = LAB_TILE[1],
                    repeats: int = 3) -> dict:
    """Achieved FLOP/s (4·N²·d per head) of the naive and tiled-flash CPU references, fp32."""
    q, k, v = (torch.randn(n, d) for _ in range(3))
    out = {}
    for scheme, fn in ((NAIVE_SCHEME, lambda: attn_naive(q, k, v)),
                       (FLASH_SCHEME, lambda: attn_flash_reference_cpu(q, k, v, B_r, B_c))):
        seconds, _ = _median_seconds(fn, repeats)
        out[scheme] = {"median_s": seconds,
                       "achieved_flops_per_s": flops(n, d) / seconds,
                       "intensity": intensity(scheme, n, d, B_r, B_c, 4)}
    out["measured_speedup"] = out[NAIVE_SCHEME]["median_s"] / out[FLASH_SCHEME]["median_s"]
    return out
