"""GPU timing (notes/labs.md, lab 02 E): the Triton kernel against naive attention and SDPA's backends.

Every point is timed on fresh random inputs, each implementation after one checked run: the
caching allocator is first handed a NaN-filled block of the output's size, so an output element
the implementation did not write shows up as NaN, and the result must pass the correctness rule
of `minimodel.gpu.correctness`. Two times per implementation:
- `ms`: GPU time per call, the median over replays of a CUDA graph of back-to-back calls
  (`triton.testing.do_bench_cudagraph`): what the kernels cost, with no host time in it. The
  ratios between implementations are ratios of these.
- `eager_ms`: the median of `triton.testing.do_bench`, one Python call at a time with the L2
  cache flushed before each. Where a call's host work (argument checks, TMA descriptors, the
  launch) outlasts its GPU work, as on the lab grid's small sizes, this is host time.

Two grids (`minimodel.gpu.grids`): the lab's (2, 4, N, 64) against the naive reference (speedup,
tokens/s, TFLOP/s) and FlashAttention's benchmark grid (batch·N = 16384, heads = 2048/d) against
SDPA's flash, memory-efficient and cuDNN backends. FLOPs: `symbolic.attention_flops`. The machine's
ceilings (a large fp16 matmul, a large device copy) are measured in the same run, after the GPU
has been under load long enough to hold its sustained clocks (`SUSTAIN_S`), so every number is
also a fraction of a ceiling of the same machine state.

These are the rows with `direction` = forward. With `backward` (the config's, default true) every
point is then timed in the backward directions too, on the same inputs (`minimodel.gpu.timing_backward`:
the backward alone, and forward + backward); the rows are built and rated by
`minimodel.gpu.timing_rows`, and the kernel's ratios are taken within a direction.
"""

from __future__ import annotations

import functools
import logging
import time

import torch
from tqdm import tqdm

from minimodel import contract, roofline_model, symbolic
from minimodel.attention_ref import reference_attn
from minimodel.contenders import builtin, registry
from minimodel.contenders.run import SKIPPED, Child, TimingCase, failure_line, timing_inputs
from minimodel.gpu import correctness, grids, timing_backward
from minimodel.gpu.timing_rows import (
    add_ratios,
    contender_skip_reason,
    empty_row,
    failures_in_status,
    with_rates,
)
from minimodel.kernel import default_config, flash_attn_forward, launch_config
from minimodel.timers import bench_graph_ms, bench_ms, host_ms

log = logging.getLogger(__name__)

attention_flops = symbolic.attention_flops


# Seconds of back-to-back matmuls before the ceilings are measured. A GPU that was idle runs its
# first seconds of load at boost clocks, faster than at the power limit it soon reaches, where
# every point of the grids runs: measured cold, the ceiling would belong to another machine state
# than the points set beside it (notes/kernel.md, "The matmul ceiling, cold and under load").
SUSTAIN_S = 15


def sustain(fn, seconds: float) -> None:
    """Run `fn` back to back for `seconds`: the GPU reaches the clocks it holds under load."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(20):
            fn()
        torch.cuda.synchronize()


def gpu_ceilings(warmup_ms: float = 25, rep_ms: float = 200, sustain_s: float = SUSTAIN_S) -> dict:
    """fp16 matmul (8192³) FLOP/s and device-copy bytes/s (2 GiB; read + write), medians, after
    `sustain_s` seconds of matmuls (`SUSTAIN_S`: the clocks of a GPU under load)."""
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    sustain(lambda: a @ b, sustain_s)
    mm_ms = bench_ms(lambda: a @ b, warmup_ms, rep_ms)
    src = torch.randn(2**29, device="cuda")  # 2 GiB of fp32, far past the L2 (the H200's: 60 MiB)
    dst = torch.empty_like(src)
    copy_ms = bench_ms(lambda: dst.copy_(src), warmup_ms, rep_ms)
    return {
        "peak_flops_per_s": 2 * n**3 / (mm_ms * 1e-3),
        "bandwidth_bytes_per_s": 2 * src.numel() * 4 / (copy_ms * 1e-3),
        "matmul": {"n": n, "dtype": "float16", "median_ms": mm_ms, "after_sustained_load_s": sustain_s},
        "copy": {"bytes": src.numel() * 4, "median_ms": copy_ms},
    }


def implementations(causal: bool, config=None) -> dict:
    """name -> fn(q, k, v) for every implementation timed; `config` fixes the kernel's tiles.
    Naive and the SDPA backends are the built-in contenders' functions."""
    impls = {contract.TRITON: lambda q, k, v: flash_attn_forward(q, k, v, causal=causal, config=config)}
    impls.update({name: functools.partial(getattr(builtin, name), causal=causal)
                  for name in (contract.NAIVE, *contract.SDPA_BACKENDS)})
    return impls


def checked_run(fn, q, k, v, exact: torch.Tensor, err_torch: float) -> tuple[bool, float]:
    """One run on a poisoned allocator: (passes the correctness rule, error vs float64)."""
    poison = torch.full_like(q, float("nan"))
    del poison  # its block goes back to the cache, NaN-filled, for the output to reuse
    out = fn(q, k, v)
    torch.cuda.synchronize()
    err = (out.double() - exact).abs().max().item()
    ok = not torch.isnan(out).any().item() and err <= correctness.tolerance(err_torch)
    return ok, err


def one_head_reference(q, k, v, causal: bool):
    """The first head of the first batch element, its float64 attention and PyTorch's fp16 error.

    A float64 reference of the whole batch would not fit: correctness is checked on this slice.
    Returns (qs, ks, vs, exact, err_torch); exact is None when even one head does not fit.
    """
    qs, ks, vs = q[:1, :1], k[:1, :1], v[:1, :1]
    try:
        exact = reference_attn(qs, ks, vs, causal=causal, upcast=True)
    except torch.OutOfMemoryError:
        return qs, ks, vs, None, float("nan")
    err_torch = (reference_attn(qs, ks, vs, causal=causal).double() - exact).abs().max().item()
    return qs, ks, vs, exact, err_torch


def time_point(grid: str, B: int, H: int, N: int, d: int, causal: bool, impl_names,
               warmup_ms: float, rep_ms: float, ceilings: dict, random_seed: int,
               contenders=()) -> list[dict]:
    """Every implementation at one (B, H, N, d, causal), with one checked run each; then each
    contender (a `minimodel.contenders.run.Child`) in its own process."""
    q, k, v = timing_inputs(TimingCase(B, H, N, d, causal, random_seed, warmup_ms, rep_ms))
    qs, ks, vs, exact, err_torch = one_head_reference(q, k, v, causal)
    cfg = launch_config(q, k, v, causal)  # what the call really runs, TMA or not
    point = {"grid": grid, "B": B, "H": H, "N": N, "d": d, "causal": causal}
    flops = attention_flops(B, H, N, d, causal)
    # the one-head check must run the configuration chosen for the whole problem, the one timed
    impls = implementations(causal, cfg)
    rows = []
    for name in impl_names:
        fn = impls[name]
        row = empty_row(point, name, flops)
        if name == contract.TRITON:  # which kernel flash_attn_forward chose, and its configuration
            row.update({"path": cfg.path, **{f"cfg_{key}": val for key, val in cfg.as_dict().items()}})
        with failures_in_status(row):
            if exact is not None:
                ok, err = checked_run(fn, qs, ks, vs, exact, err_torch)
                row.update(checked=ok, err_vs_fp64=err)
                if not ok:
                    row["status"] = "failed its correctness check"
            call = lambda fn=fn: fn(q, k, v)
            row["eager_ms"] = bench_ms(call, warmup_ms, rep_ms)
            if grid == contract.LAB_GRID:  # where N is small enough for the host to matter
                row["host_ms"] = host_ms(call)
            try:
                row["ms"], row["timing"] = bench_graph_ms(call, rep_ms), "cuda_graph"
            except RuntimeError as err:  # not capturable: the eager time is all there is
                log.warning("%s is not capturable in a CUDA graph (%s): eager time kept", name, err)
                row["ms"], row["timing"] = row["eager_ms"], "eager"
        rows.append(with_rates(row, ceilings))
    for child in contenders:
        rows.append(with_rates(time_contender(child, empty_row(point, child.contender.name, flops), exact,
                                               err_torch, random_seed, warmup_ms, rep_ms), ceilings))
    return rows


def time_contender(child, row: dict, exact, err_torch: float, random_seed: int, warmup_ms: float,
                   rep_ms: float) -> dict:
    """A contender at one point (`row`, its empty timing row), in its child process: the same
    inputs (drawn from the same seed), the same one-head check, eager and graph times taken there
    (`minimodel.contenders.run`)."""
    reason = contender_skip_reason(child.contender, row)
    if reason:
        return {**row, "status": f"skipped: {reason}"}
    case = TimingCase(row["B"], row["H"], row["N"], row["d"], row["causal"], random_seed, warmup_ms, rep_ms,
                      host_cost=row["grid"] == contract.LAB_GRID)
    status, result = child.call("time", case)
    if status == SKIPPED:  # the contender declined this point
        return {**row, "status": f"{contract.SKIPPED}: {result}"}
    if status != "ok":
        return {**row, "status": f"failed: {result}"}
    row.update({key: result[key] for key in ("ms", "eager_ms", "host_ms", "timing")})
    if exact is not None:
        err = (result["head"].to(exact.device).double() - exact).abs().max().item()
        ok = not result["has_nan"] and err <= correctness.tolerance(err_torch)
        row.update(checked=ok, err_vs_fp64=err, status=contract.OK if ok else "failed its correctness check")
    return row


def run(cfg: dict, random_seed: int, cpu_prediction: dict | None = None, progress=None,
        contenders=()) -> dict:
    """The whole timing stage on the CUDA device: ceilings, both grids, ratios, predictions.

    `contenders` (`minimodel.contenders.Contender`) are timed at every point too, each in a
    child process that lives for the whole stage.
    """
    children = [Child(c, registry.SEARCH) for c in contenders]
    for child in children:  # started before the ceilings: no idle GPU between them and the points
        child.start()
    ceilings = gpu_ceilings(cfg["warmup_ms"])
    rows = []
    try:
        for i, p in enumerate(tqdm(grids.points(cfg), desc="timing", file=progress)):
            args = (p.grid, p.B, p.H, p.N, p.d, p.causal, contract.IMPLEMENTATIONS_BY_GRID[p.grid],
                    cfg["warmup_ms"], cfg["rep_ms"], ceilings, random_seed + i, children)
            rows += time_point(*args)
            if cfg["backward"]:  # the same inputs, and a dO drawn after them
                torch.cuda.empty_cache()
                rows += timing_backward.time_point(*args)
            torch.cuda.empty_cache()  # the point's inputs are gone: hand their memory back
    finally:
        for child in children:
            child.stop()
    for child in children:  # after the bar: one line each on the console, and in the log
        mine = [r for r in rows if r["impl"] == child.contender.name]
        failed = [r["status"] for r in mine if str(r["status"]).startswith("failed")]
        line = failure_line(child.contender.name, failed, sum(not str(r["status"]).startswith("skipped")
                                                              for r in mine), child.log)
        if line:
            print(line, file=progress)
    add_ratios(rows)
    machine = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
               "triton": __import__("triton").__version__}
    # the device's L2, beside the config's assumed symbolic.l2_bytes (not a column: every row's)
    device_l2 = int(torch.cuda.get_device_properties(0).L2_cache_size)
    for row in rows:
        row.update(machine)  # every row says where and with what it was measured
    predictions = []
    for p in grids.lab_grid(cfg):
        if p.causal:
            continue
        block_m = default_config(torch.empty(p.B, p.H, p.N, p.d, device="cuda"), False).BLOCK_M
        predictions.append(roofline_model.predict_speedup(ceilings, p.N, p.d, block_m, block_m, "float16"))
    return {
        **machine,
        "directions": list(directions(cfg)),
        "device_l2_bytes": device_l2,
        "ceilings": ceilings,
        "lab_grid_predictions_from_gpu_ceilings": predictions,
        "lab01_prediction_from_cpu_ceilings": cpu_prediction,
        "rows": rows,
    }


def directions(cfg: dict) -> tuple[str, ...]:
    """The directions timed: the forward, then with `backward` the backward alone and fwd+bwd."""
    return (contract.FORWARD, *(timing_backward.DIRECTIONS if cfg["backward"] else ()))


def no_gpu_rows(cfg: dict) -> list[dict]:
    """Without CUDA: one row per planned point and direction saying that it could not be timed
    (the forward's rows first)."""
    return [{"grid": p.grid, "N": p.N, "d": p.d, "causal": p.causal, "status": contract.NO_GPU_TIMING,
             "ms": None, "direction": direction} for direction in directions(cfg) for p in grids.points(cfg)]
