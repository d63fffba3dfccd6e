"""Stage 3 for decode: every implementation (`gpu/decode_impls.py`) checked against float64 and
timed at the points of the config's `decode.gpu` grid, its GB/s set beside the machine's copy
bandwidth (the timing stage's ceiling, `timing.json`'s `bandwidth_bytes_per_s`).

- Correctness: the project's rule (`floor.correctness_rule`): err <= max(1e-3, 2 × err_torch),
  err_torch being the naive decode's own in the inputs' dtype, both against the naive decode in
  float64 (sequence by sequence, so that the reference of a 16 GB cache fits beside it).
- Time: GPU time per call in CUDA-graph replays (`floor.timers.Sampler`), `samples` samples a
  point in interleaved rounds (each round every implementation once, shuffled), the median kept.
  A graph replays its calls back to back without flushing the L2, where a small cache would stay:
  the timed calls take turns over as many copies of the K and V caches as make at least
  `rotate_l2_multiple` × the device's L2 (Q, O and cache_seqlens, a few KiB, are not rotated).
- GB/s: the least bytes a decode moves (Q, the valid keys and values once, O: `byte_model.decode`'s
  split-KV scheme with one split, at the point's cache_seqlens) over the median time, and its
  fraction of the copy bandwidth.

Without a CUDA device nothing is timed: each planned row says so, and the kernel is checked under
Triton's interpreter at the `interpreter` points instead (`interpreter_rows`).
"""

from __future__ import annotations

import logging
import math
import random
import statistics

import torch

from minimodel.floor import contract, decode_grid, timers
from minimodel.floor.byte_model import decode as model
from minimodel.floor.correctness_rule import tolerance
from minimodel.floor.decode_ref import naive_decode
from minimodel.gpu import decode_impls
from minimodel.gpu.decode_impls import Case, Unsupported

log = logging.getLogger(__name__)
CUDA, INTERPRETER = "cuda", "interpreter"
SAMPLE_COLUMNS = (*decode_grid.KEY, "total_kv", "impl", "sample", "ms")  # contract.DECODE_GPU_SAMPLES


def implementations(cfg: dict) -> list[str]:
    """Every decode implementation but the config's `leave_out`, in the table's order (the kernel,
    the kernel held to one split and naive first)."""
    return [name for name in decode_impls.IMPLEMENTATIONS if name not in cfg["leave_out"]]


def least_bytes(point: decode_grid.DecodePoint) -> float:
    """Q, the valid keys and values, and O, each once: the yardstick of every implementation's GB/s."""
    return model.model_bytes(contract.SPLIT_KV_SCHEME, point.batch, point.heads_q, point.heads_kv,
                             point.len_q, point.cache_seqlens, point.head_dim, point.dtype_bytes, splits=1)


def make_case(point: decode_grid.DecodePoint, device, generator: torch.Generator) -> Case:
    dtype = getattr(torch, point.dtype)
    q_shape = (point.batch, point.len_q, point.heads_q, point.head_dim)
    kv_shape = (point.batch, point.kv_len, point.heads_kv, point.head_dim)
    q = torch.randn(q_shape, generator=generator, device=device, dtype=dtype)
    k, v = (torch.randn(kv_shape, generator=generator, device=device, dtype=dtype) for _ in range(2))
    lengths = point.cache_seqlens
    return Case(q, k, v, torch.tensor(lengths, dtype=torch.int32, device=device), lengths)


def check(call, case: Case, exact: torch.Tensor, err_torch: float) -> dict:
    """The rule's columns for one implementation's output at the case."""
    out = call()
    err = (out.double() - exact).abs().max().item()
    has_nan = bool(torch.isnan(out).any())
    tol = tolerance(err_torch)
    return {"err_vs_fp64": err, "err_torch_vs_fp64": err_torch, "tolerance": tol, "has_nan": has_nan,
            "passed": (not has_nan) and err <= tol}


def interpreter_rows(cfg: dict, max_cache_bytes: int, random_seed: int) -> list[dict]:
    """The kernel checked under Triton's interpreter at `cfg["interpreter"]`'s points."""
    rows = []
    for i, point in enumerate(decode_grid.points(cfg["interpreter"], max_cache_bytes)):
        gen = torch.Generator().manual_seed(random_seed + i)
        case = make_case(point, "cpu", gen)
        exact = naive_decode(case.q, case.k_cache, case.v_cache, case.lengths, upcast=True)
        low = naive_decode(case.q, case.k_cache, case.v_cache, case.lengths)
        err_torch = (low.double() - exact).abs().max()
        call, info = decode_impls.make(contract.TRITON, case)
        result = check(call, case, exact, err_torch.item())
        rows.append({**point.row(), "impl": contract.TRITON, "backend": INTERPRETER,
                     "status": contract.OK if result["passed"] else contract.FAILED_CHECK, **result, **info})
    return rows


def no_gpu_rows(cfg: dict, max_cache_bytes: int) -> list[dict]:
    """Every planned (point, implementation) of the timed grid, saying that nothing was timed."""
    return [{**point.row(), "impl": impl, "backend": CUDA, "status": contract.NO_GPU_TIMING,
             "least_bytes": least_bytes(point)}
            for point in decode_grid.points(cfg, max_cache_bytes) for impl in implementations(cfg)]


def run(cfg: dict, max_cache_bytes: int, bandwidth: float, timing_cfg: dict, random_seed: int,
        progress=None) -> tuple[list[dict], list[dict], dict]:
    """(rows, samples, summary) of every point of `cfg` (`decode.gpu`) on the CUDA device."""
    device = torch.device("cuda")
    l2 = int(torch.cuda.get_device_properties(device).L2_cache_size)
    rows, samples = [], []
    points = decode_grid.points(cfg, max_cache_bytes)
    for i, point in enumerate(points):
        print(f"decode {i + 1}/{len(points)}: {point}", file=progress)
        found, taken = _point(point, cfg, l2, bandwidth, timing_cfg, random_seed + i)
        rows += found
        samples += taken
        timers.release_memory()
    summary = {"device": torch.cuda.get_device_name(device), "device_l2_bytes": l2,
               "bandwidth_bytes_per_s": bandwidth, "points": len(points),
               "rotation": f"the K and V caches rotated over copies making at least "
                           f"{cfg['rotate_l2_multiple']}x the device's L2 ({l2} bytes); Q and O not rotated",
               "kernel_passed": kernel_passed(rows)}
    return rows, samples, summary


def kernel_passed(rows: list[dict]) -> bool:
    """Whether the kernel passed at every point it was checked (a contender's failure is its row's)."""
    return all(r["passed"] for r in rows if r["impl"] == contract.TRITON and "passed" in r)


def _point(point, cfg, l2: int, bandwidth: float, timing_cfg: dict, seed: int):
    """(rows, samples) of every implementation at one point."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    case = make_case(point, "cuda", gen)
    copies = max(1, math.ceil(cfg["rotate_l2_multiple"] * l2 / point.cache_bytes))
    cases = [case] + [Case(case.q, torch.randn_like(case.k_cache), torch.randn_like(case.v_cache),
                           case.cache_seqlens, case.lengths) for _ in range(copies - 1)]
    exact = naive_decode(case.q, case.k_cache, case.v_cache, case.lengths, upcast=True)
    low = naive_decode(case.q, case.k_cache, case.v_cache, case.lengths)
    err_torch = (low.double() - exact).abs().max()
    del low
    base = {**point.row(), "backend": CUDA, "least_bytes": least_bytes(point), "cache_copies": copies,
            "bound_us": model.bound_seconds(least_bytes(point), bandwidth) * 1e6}
    rows, samplers = {}, {}
    for impl in implementations(cfg):
        rows[impl] = row = {**base, "impl": impl}
        try:
            calls = [decode_impls.make(impl, c) for c in cases]
            row.update(calls[0][1])
            row.update(check(calls[0][0], case, exact, err_torch.item()))
            if not row["passed"]:
                row["status"] = contract.FAILED_CHECK
                continue
            turn = iter(range(10**12))
            fns = [fn for fn, _ in calls]
            # each call of the graph takes the next copy of the caches
            samplers[impl] = timers.Sampler(lambda fns=fns, turn=turn: lambda: fns[next(turn) % len(fns)](),
                                            timing_cfg["sample_ms"])
            row["timing"] = samplers[impl].timing
        except Unsupported as err:
            row["status"] = f"{contract.UNSUPPORTED}: {err}"
        except torch.OutOfMemoryError:
            row["status"] = contract.OUT_OF_MEMORY
        except Exception as err:  # a failure of one implementation is its row's, not the stage's
            first = str(err).splitlines()[0][:160] if str(err) else ""
            row["status"] = f"{contract.FAILED}: {type(err).__name__}: {first}"
            log.exception("decode %s at %s", impl, point)
        timers.release_memory()
    taken = {impl: [] for impl in samplers}
    for sample in range(cfg["samples"]):
        order = list(samplers)
        random.Random(seed * 1000 + sample).shuffle(order)
        for impl in order:
            taken[impl].append(samplers[impl].sample(timing_cfg["sample_warmup_ms"]))
    found = []
    for impl, row in rows.items():
        if impl in taken:
            ms = statistics.median(taken[impl])
            gbs = row["least_bytes"] / (ms * 1e-3) / 1e9
            row.update(status=contract.OK, ms=ms, samples=len(taken[impl]), ms_min=min(taken[impl]),
                       ms_max=max(taken[impl]), gb_per_s=gbs,
                       fraction_of_copy_bandwidth=gbs * 1e9 / bandwidth)
            samplers[impl].release()
        found.append(row)
    sample_rows = [{**point.row(), "impl": impl, "sample": s, "ms": ms}
                   for impl, values in taken.items() for s, ms in enumerate(values)]
    return found, sample_rows
