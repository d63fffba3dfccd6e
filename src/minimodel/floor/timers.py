"""The three ways a GPU call is timed, shared by the timing stage and the contenders' child
processes (below both, so that the contenders never reach up into the GPU stage that runs them).

- `bench_ms`: eager, the median of `triton.testing.do_bench`, one Python call at a time with the
  L2 flushed before each: host time included;
- `bench_graph_ms`: GPU time, the median over replays of a CUDA graph of back-to-back calls
  (`triton.testing.do_bench_cudagraph`);
- `host_ms`: the host's cost of one call, the wall time of back-to-back calls over their number;
- `Sampler`: what the timing stage takes: a call prepared once (its eager time, its host cost,
  a CUDA graph of back-to-back calls), then sampled k times, interleaved with the other
  implementations at the point; a backward through autograd too (`autograd_call`), whose graph
  is captured on the stream its forward ran on;
- `first_heads`: one checked call on a poisoned allocator, the first heads of what it returns.
"""

import gc
import logging
import math
import statistics
import time

import torch
import triton.testing

from minimodel.floor import contract

log = logging.getLogger(__name__)

HOST_CALLS = 200  # back-to-back calls of one host-cost reading


def bench_ms(fn, warmup_ms: float, rep_ms: float) -> float:
    """Eager: median ms of one call at a time from Python, L2 flushed before each."""
    return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))


def bench_graph_ms(fn, rep_ms: float) -> float:
    """GPU time: median ms per call over replays of a CUDA graph of about rep_ms of calls (the
    development tools' single reading; the timing stage takes samples with `Sampler`)."""
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


class Sampler:
    """One call prepared once at a point, then sampled as often as the stage asks (`sample`).

    `make()` builds the call; it is called on the stream the call will run on (a forward through
    autograd too: autograd runs a backward on its forward's stream, which must be the one
    captured). Preparing takes the eager time (`eager_ms`, `bench_ms` of a call built on the
    current stream), the host's cost with `host_cost` (`host_ms`), then captures a CUDA graph of
    back-to-back calls on a stream of its own, as many as take about `sample_ms / REPLAYS` (without
    `rep_ms`, no eager time is taken). A sample is the median time per call over up to REPLAYS
    replays of that graph (`replays`): GPU time, with no host time and no launch gap between calls
    in it. A call that cannot be captured is sampled eagerly (`timing` = "eager": `bench_ms` over
    `sample_ms`); one that runs out of memory while captured raises, as out of memory.
    """

    REPLAYS = 5
    MAX_CALLS = 2_000  # calls in one graph: a 3 µs kernel's 8 ms replay; capturing more costs host time

    def __init__(self, make, sample_ms: float, warmup_ms: float | None = None, rep_ms: float | None = None,
                 host_cost: bool = False):
        self.eager_ms = self.host_ms = None
        if rep_ms is not None:  # the eager time, and the host's cost, of a call of its own
            call = make()
            self.eager_ms = bench_ms(call, warmup_ms, rep_ms)
            self.host_ms = host_ms(call) if host_cost else None
            del call  # a backward's saved forward: the graph's own is built next
        self.sample_ms, self.graph, self.call, self.replay_ms = sample_ms, None, None, None
        self.timing = "cuda_graph"
        try:
            self._capture(make)
        except torch.OutOfMemoryError:
            raise  # not a call that cannot be captured: the stage says out of memory, or retries alone
        except RuntimeError as err:  # not capturable: sampled eagerly
            first = str(err).splitlines()[0][:160] if str(err) else type(err).__name__
            log.warning("not capturable in a CUDA graph (%s): sampled eagerly", first)
            self.timing = "eager"
        if self.timing == "eager":
            # outside the except: its traceback held the failed capture's call (a saved forward) alive
            release_memory()
            self.graph, self.call = None, make()

    def _capture(self, make) -> None:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            fn = make()
            for _ in range(3):  # compiles, and warms the allocator up before the capture
                fn()
            start.record(stream)
            for _ in range(3):
                fn()
            end.record(stream)
            end.synchronize()
            one = max(start.elapsed_time(end) / 3, 1e-4)
            self.calls = max(1, min(self.MAX_CALLS, round(self.sample_ms / self.REPLAYS / one)))
            self.replay_ms = one * self.calls
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=stream):
                for _ in range(self.calls):
                    fn()
        torch.cuda.synchronize()
        self.graph, self.call = graph, fn  # the call holds what the graph reads (a saved forward)

    def replays(self, warmup_ms: float) -> tuple[int, int]:
        """(untimed, timed) replays of one sample: about `warmup_ms`, then about `sample_ms` in
        at most REPLAYS replays, at least one each, by the graph's measured duration. A call longer
        than `sample_ms / REPLAYS` fills a replay alone (naive attention at N = 16384: 90 ms), so
        a count of replays fixed for the short calls would time it for seconds."""
        warm = math.ceil(warmup_ms / self.replay_ms) if warmup_ms > 0 else 0
        return warm, max(1, min(self.REPLAYS, round(self.sample_ms / self.replay_ms)))

    def sample(self, warmup_ms: float = 0.0) -> float:
        """One sample: ms per call, the median over the replays of the graph (`replays`), after
        about `warmup_ms` of untimed replays. On a GPU at its power limit the clocks follow the
        work of the last tens of ms: the warm-up lets them settle on this call, not on whatever
        ran before it (notes/timing.md)."""
        if self.graph is None:
            return bench_ms(self.call, warmup_ms, self.sample_ms)
        warm, timed = self.replays(warmup_ms)
        for _ in range(warm):
            self.graph.replay()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(timed):
            start.record()
            self.graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / self.calls)
        return float(statistics.median(times))

    def release(self) -> None:
        """Free the graph and what it holds."""
        self.graph = self.call = None


def release_memory(collect: bool = True) -> None:
    """Hand the device's unused memory back, once what only reference cycles held (a failed
    call's traceback and its frames) is collected; collect=False where nothing failed, so that
    reference counts have freed it all (a full collection of a stage's heap takes a tenth of a
    second or more)."""
    if collect:
        gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def graph_ms(make, rep_ms: float) -> float:
    """One sample of about `rep_ms` of `make()`'s call in CUDA-graph replays (the development tools')."""
    return Sampler(make, rep_ms).sample()


def autograd_call(fn, leaves, do, direction: str):
    """A call returning (dQ, dK, dV) of `fn(*leaves)` by autograd at dO `do`. backward: the forward
    runs once now and its graph is kept, the call runs the backward alone; fwd+bwd: the call runs both."""
    if direction == contract.BACKWARD:
        out = fn(*leaves)
        return lambda: torch.autograd.grad(out, leaves, do, retain_graph=True)
    if direction == contract.FWD_BWD:
        return lambda: torch.autograd.grad(fn(*leaves), leaves, do)
    raise ValueError(f"direction {direction!r}; accepted: {contract.BACKWARD}, {contract.FWD_BWD}")


def first_heads(call, like: torch.Tensor, bnhd: bool = False) -> tuple[tuple[torch.Tensor, ...], bool]:
    """One checked call of `call` on a poisoned allocator: the first head of each tensor it returns
    (in (B, H, N, d); bnhd: they are (B, N, H, d)), on the CPU, and whether any holds NaN."""
    poison = torch.full_like(like, float("nan"))
    del poison  # its block goes back to the cache, NaN-filled, for an output to reuse
    got = call()
    got = (got,) if isinstance(got, torch.Tensor) else tuple(got)
    torch.cuda.synchronize()
    heads = tuple((g[:1, :, :1].transpose(1, 2) if bnhd else g[:1, :1]).detach().cpu() for g in got)
    has_nan = any(bool(torch.isnan(g).any()) for g in got)
    return heads, has_nan
