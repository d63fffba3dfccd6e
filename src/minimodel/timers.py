"""The three ways a GPU call is timed, shared by the timing stage and the contenders' child
processes (below both, so that the contenders never reach up into the GPU stage that runs them).

- `bench_ms`: eager, the median of `triton.testing.do_bench`, one Python call at a time with the
  L2 flushed before each: host time included;
- `bench_graph_ms`: GPU time, the median over replays of a CUDA graph of back-to-back calls
  (`triton.testing.do_bench_cudagraph`);
- `host_ms`: the host's cost of one call, the wall time of back-to-back calls over their number.
"""

import time

import torch
import triton.testing

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
