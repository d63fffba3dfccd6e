"""The two ways a GPU call is timed, shared by the timing stage and the contenders' child processes
(below both, so that the contenders never reach up into the GPU stage that runs them).

- `bench_ms`: eager, the median of `triton.testing.do_bench`, one Python call at a time with the
  L2 flushed before each: host time included;
- `bench_graph_ms`: GPU time, the median over replays of a CUDA graph of back-to-back calls
  (`triton.testing.do_bench_cudagraph`).
"""

import triton.testing


def bench_ms(fn, warmup_ms: float, rep_ms: float) -> float:
    """Eager: median ms of one call at a time from Python, L2 flushed before each."""
    return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))


def bench_graph_ms(fn, rep_ms: float) -> float:
    """GPU time: median ms per call over replays of a CUDA graph of about rep_ms of calls."""
    return float(triton.testing.do_bench_cudagraph(fn, rep=rep_ms, return_mode="median"))
