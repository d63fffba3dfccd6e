"""The three ways a GPU call is timed, shared by the timing stage and the contenders' child
processes (below both, so that the contenders never reach up into the GPU stage that runs them).

- `bench_ms`: eager, the median of `triton.testing.do_bench`, one Python call at a time with the
  L2 flushed before each: host time included;
- `bench_graph_ms`: GPU time, the median over replays of a CUDA graph of back-to-back calls
  (`triton.testing.do_bench_cudagraph`);
- `host_ms`: the host's cost of one call, the wall time of back-to-back calls over their number;
- `graph_ms` and `measure`: a backward through autograd (`autograd_call`), whose graph must be
  captured on the stream its forward ran on.
"""

import logging
import time

import torch
import triton.testing

from minimodel import contract

log = logging.getLogger(__name__)

HOST_CALLS = 200  # back-to-back calls of one host-cost reading


def bench_ms(fn, warmup_ms: float, rep_ms: float) -> float:
    """Eager: median ms of one call at a time from Python, L2 flushed before each."""
    return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))


def bench_graph_ms(fn, rep_ms: float) -> float:
    """GPU time: median ms per call over replays of a CUDA graph of about rep_ms of calls."""
    return float(triton.testing.do_bench_cudagraph(fn, rep=rep_ms, return_mode="median"))


def host_ms(fn, calls: int = HOST_CALLS, repeats: int = 5) -> float:
    """Host cost: ms per call of `calls` back-to-back calls from Python, timed until the last call
    has returned (its work queued, not necessarily done), the median of `repeats` readings. Where
    the GPU work of a call takes longer than its launch, the launch queue may fill and this reads
    the GPU's time instead: it is the host's cost only where the host is the slower of the two."""
    fn()
    torch.cuda.synchronize()
    readings = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        readings.append((time.perf_counter() - start) * 1e3 / calls)
        torch.cuda.synchronize()
    return float(sorted(readings)[len(readings) // 2])


def graph_ms(make, rep_ms: float, batches: int = 10) -> float:
    """Median ms of one call in CUDA-graph replays of about rep_ms. `make()` builds the call on the
    capturing stream (a forward through autograd too: autograd runs a backward on its forward's
    stream, which must be the one captured)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn = make()
        for _ in range(3):  # compiles, and warms the allocator up before the capture
            fn()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    replays = max(1, int(rep_ms / batches / max(start.elapsed_time(end), 1e-3)))
    times = []
    for _ in range(batches):
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / replays)
    return sorted(times)[len(times) // 2]


def autograd_call(fn, leaves, do, direction: str):
    """A call returning (dQ, dK, dV) of `fn(*leaves)` by autograd at dO `do`. backward: the forward
    runs once now and its graph is kept, the call runs the backward alone; fwd+bwd: the call runs both."""
    if direction == contract.BACKWARD:
        out = fn(*leaves)
        return lambda: torch.autograd.grad(out, leaves, do, retain_graph=True)
    if direction == contract.FWD_BWD:
        return lambda: torch.autograd.grad(fn(*leaves), leaves, do)
    raise ValueError(f"direction {direction!r}; accepted: {contract.BACKWARD}, {contract.FWD_BWD}")


def measure(make, like: torch.Tensor, warmup_ms: float, rep_ms: float, bnhd: bool = False) -> dict:
    """One checked call of `make()`'s call (its gradients' first heads come back, in (B, H, N, d)),
    then eager and CUDA-graph times. bnhd: the gradients are (B, N, H, d)."""
    call = make()
    poison = torch.full_like(like, float("nan"))
    del poison  # its block goes back to the cache, NaN-filled, for a gradient to reuse
    got = call()
    torch.cuda.synchronize()
    heads = tuple((g[:1, :, :1].transpose(1, 2) if bnhd else g[:1, :1]).detach().cpu() for g in got)
    has_nan = any(bool(torch.isnan(g).any()) for g in got)
    del got
    eager = bench_ms(call, warmup_ms, rep_ms)
    del call  # its saved forward: the graph's own is built next
    try:
        ms, how = graph_ms(make, rep_ms), "cuda_graph"
    except RuntimeError as err:  # not capturable: the eager time is all there is
        log.warning("not capturable in a CUDA graph (%s): eager time kept", str(err).splitlines()[0][:160])
        ms, how = eager, "eager"
    return {"heads": heads, "has_nan": has_nan, "ms": ms, "eager_ms": eager, "timing": how}
