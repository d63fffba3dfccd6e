"""One point of the timing stage, in one pass: every implementation prepared once, then sampled
in interleaved rounds, and checked against float64.

For a pass (`direction`) at a point, on the inputs drawn from the point's seed (Q, K, V; a
backward's dO after them, so its Q, K, V are the forward's):
1. each implementation that runs there (`runs_at`) is prepared (`prepare`): one checked call on a
   poisoned allocator, its eager time, a CUDA graph; one that does not gets a row saying why;
2. then `samples` rounds: each round takes one sample of every prepared implementation, in an
   order shuffled each round (`rounds`), so that clock and thermal drift between rounds land on
   all of them alike, and round i of one implementation is taken beside round i of every other
   (the comparison pairs their samples by round); before each sample, `sample_warmup_ms` of
   untimed replays of the same call let the clocks settle on it;
   (an implementation that holds most of the device's memory once prepared is sampled at once
   instead, its rounds back to back, and released before the next is prepared: `interleaved`;
   one that runs out of memory while others are prepared is prepared again once those are
   sampled and released, so that holding them never makes an out-of-memory row of its own);
3. each row's `ms` is the median of its samples, `samples` their count; the samples themselves go
   to the long table (`timing_rows.KEY`, `sample`, `ms`).
The first head of each output (or of dQ, dK, dV) is checked against float64 on that head with the
correctness rule (`minimodel.floor.correctness_rule`): `checked`, `err_vs_fp64`, and the status
`contract.FAILED_CHECK` where it misses (its times are kept, and said so by the status). The
reference waits in host memory, and each implementation's heads are dropped once checked, so that
what a pass holds on the device is its inputs and the prepared calls alone.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import random
import statistics
import time

import torch

from minimodel.contenders.timed import TimingCase, timing_inputs
from minimodel.floor import contract
from minimodel.floor.attention_ref import reference_attn
from minimodel.floor.byte_model.backward import attention_flops
from minimodel.floor.correctness_rule import grad_errors, reference_grads, tolerance
from minimodel.floor.timers import release_memory
from minimodel.gpu.grids import Point
from minimodel.gpu.timing_rows import KEY, empty_row, failures_in_status, with_rates

# An implementation whose prepared call leaves less than this fraction of the device's memory free
# (naive attention's graph at N = 16384 holds tens of GiB) is sampled at once and released before
# the next is prepared, so that the others still find room: its row says `interleaved` False.
ALONE_BELOW = 0.25


class Clock(collections.Counter):
    """Wall seconds by what they went on (`timing.run`'s `seconds`): "reference", "prepare <impl>"
    (its checked call, eager time, graph capture and any compile), "sample <impl>" (its rounds).
    Time spent on something nested inside another is counted once, for the inner one (the rounds
    of the others that a preparation makes room with are theirs)."""

    def __init__(self):
        super().__init__()
        self._inner = []  # per open `on`, the seconds its nested ones took

    @contextlib.contextmanager
    def on(self, what: str):
        start = time.perf_counter()
        self._inner.append(0.0)
        try:
            yield
        finally:
            spent = time.perf_counter() - start
            self[what] += spent - self._inner.pop()
            if self._inner:
                self._inner[-1] += spent


def flops(point: Point, direction: str) -> float:
    """FLOPs of one call (FlashAttention's convention: backward 2.5 × the forward's, fwd+bwd 3.5 ×)."""
    return attention_flops(point.B, point.H, point.N, point.d, point.causal, direction)


def forward_reference(q, k, v, causal: bool):
    """(float64 attention, PyTorch's fp16 error) of the first head of the first batch element; (None,
    nan) when even one head does not fit (a float64 reference of the whole batch would not)."""
    qs, ks, vs = q[:1, :1], k[:1, :1], v[:1, :1]
    try:
        exact = reference_attn(qs, ks, vs, causal=causal, upcast=True)
    except torch.OutOfMemoryError:
        return None, float("nan")
    return exact, (reference_attn(qs, ks, vs, causal=causal).double() - exact).abs().max().item()


def backward_reference(q, k, v, do, causal: bool):
    """(float64 autograd's, PyTorch's own fp16) dQ, dK, dV of the first head; (None, None) when even
    one head does not fit."""
    qs, ks, vs, dos = (t[:1, :1] for t in (q, k, v, do))
    try:
        return reference_grads(qs, ks, vs, dos, causal, upcast=True), reference_grads(qs, ks, vs, dos, causal)
    except torch.OutOfMemoryError:
        return None, None


def on_host(reference):
    """A reference (tensors, tuples of them, numbers) with its tensors in host memory."""
    if isinstance(reference, torch.Tensor):
        return reference.cpu()
    if isinstance(reference, tuple):
        return tuple(on_host(part) for part in reference)
    return reference


def check(row: dict, measured: dict, reference, direction: str) -> None:
    """`checked` and `err_vs_fp64` of a prepared implementation's first heads; the status says a miss."""
    exact, other = reference
    if exact is None:
        return
    if direction == contract.FORWARD:
        err = (measured["heads"][0].to(exact.device).double() - exact).abs().max().item()
        ok = err <= tolerance(other)
    else:
        verdict = grad_errors([h.to(exact[0].device) for h in measured["heads"]], exact, other)
        ok, err = verdict["passed"], verdict["err_kernel_vs_fp64"]
    ok = ok and not measured["has_nan"]
    row.update(checked=ok, err_vs_fp64=err)
    if not ok:
        row["status"] = contract.FAILED_CHECK


def crowded() -> bool:
    """Whether the device has less than `ALONE_BELOW` of its memory free (every process's use)."""
    free, total = torch.cuda.mem_get_info()
    return free < ALONE_BELOW * total


def rounds(prepared: dict, samples: int, failures: dict, seed: int = 0,
           clock: Clock | None = None) -> dict:
    """name -> its samples: `samples` rounds over `prepared` (name -> (row, Prepared)), each in an
    order of its own, shuffled from `seed` (the same seed, the same orders). A sample that fails
    ends that implementation's sampling (`failures`: name -> the context manager that records it
    in its row).

    Shuffled, not rotated: rotating a fixed order by one keeps every implementation behind the
    same neighbour in every round, and on the H200 a sample carries some of the clock state its
    predecessor left (up to 6 % in a run of 40 ms samples: notes/timing.md), so a rotation would
    give each implementation a bias of its own; shuffled, each follows every other in turn."""
    taken = {name: [] for name in prepared}
    order, shuffle = list(prepared), random.Random(seed).shuffle
    clock = Clock() if clock is None else clock
    for _ in range(samples):
        shuffle(order)
        for name in list(order):
            if name not in prepared:
                continue
            with failures[name](), clock.on(f"sample {name}"):
                taken[name].append(prepared[name][1].sample())
                continue
            prepared.pop(name)[1].release()  # failed: its status says why
            taken.pop(name)
    return taken


def flush(prepared: dict, samples: int, failures: dict, seed: int, clock: Clock | None = None) -> dict:
    """The rounds of every implementation prepared so far (`rounds`), then each released and the
    memory handed back; `prepared` is emptied."""
    try:
        return rounds(prepared, samples, failures, seed, clock)
    finally:
        for _, ready in prepared.values():
            ready.release()
        prepared.clear()
        torch.cuda.empty_cache()  # released by reference counts: nothing for the collector


def prepare_alone_if_need_be(impl, case: TimingCase, direction: str, inputs, make_room):
    """`impl.prepare(...)`; where that runs out of memory, `make_room()` (the others prepared so
    far sampled and released; False when there were none) and one more try, whose running out of
    memory is the row's status.

    The second try starts outside the first one's `except`: the traceback of its error holds the
    frames of the failed preparation, and with them what it had built (a backward's saved forward,
    tens of GiB for naive attention at N = 16384), until it is cleared and collected."""
    try:
        return impl.prepare(case, direction, inputs)
    except torch.OutOfMemoryError:
        if not make_room():
            raise
    release_memory()
    return impl.prepare(case, direction, inputs)


def time_pass(point: Point, direction: str, impls, case: TimingCase, samples: int,
              ceilings: dict | None, clock: Clock | None = None) -> tuple[list[dict], list[dict]]:
    """(rows, sample rows) of every implementation in `impls` at `point` in `direction`; the wall
    seconds they took added to `clock`. Without `ceilings` (`minimodel.gpu.warm`'s first calls),
    the rows are not rated against them."""
    clock = Clock() if clock is None else clock
    inputs = timing_inputs(case, 3 if direction == contract.FORWARD else 4)
    with clock.on("reference"):
        reference = (forward_reference(*inputs, point.causal) if direction == contract.FORWARD
                     else backward_reference(*inputs, point.causal))
    # the reference's few MB kept in host memory, and the GiB its float64 work cached handed back
    # before anything is prepared: a small tensor left in a large cached segment keeps the whole
    # segment from `empty_cache`, and the room naive attention finds at N = 16384 then depends on
    # what ran before it (notes/timing.md: 88-106 GB reserved, 1-19 GB allocated between passes)
    reference = on_host(reference)
    release_memory(collect=False)  # freed by reference counts: nothing for the collector
    where = dataclasses.asdict(point)
    rows, prepared, failures, taken_alone = {}, {}, {}, {}

    def make_room() -> bool:
        """The implementations prepared so far sampled and released; False when there are none."""
        if not prepared:
            return False
        taken_alone.update(flush(prepared, samples, failures, case.seed, clock))
        return True
    for impl in impls:
        row = rows[impl.name] = empty_row(where, impl.name, flops(point, direction), direction)
        failures[impl.name] = lambda row=row: failures_in_status(row)
        reason = impl.runs_at(point, direction)
        if reason:
            row["status"] = f"{contract.SKIPPED}: {reason}"
            continue
        with failures[impl.name](), clock.on(f"prepare {impl.name}"):
            ready = prepare_alone_if_need_be(impl, case, direction, inputs, make_room)
            measured = {k: v for k, v in ready.measured.items() if k not in ("heads", "has_nan")}
            row.update(measured)
            check(row, ready.measured, reference, direction)
            ready.measured.pop("heads", None)  # checked: its first heads' memory goes back with the rest
            prepared[impl.name] = (row, ready)
            row["interleaved"] = not crowded()
        if not row["interleaved"] and impl.name in prepared:  # sampled now, then its memory goes back
            alone = {impl.name: prepared.pop(impl.name)}
            taken_alone.update(flush(alone, samples, failures, case.seed, clock))
    taken = taken_alone | flush(prepared, samples, failures, case.seed, clock)
    sample_rows = []
    for name, values in taken.items():
        row = rows[name]
        row.update(ms=float(statistics.median(values)), samples=len(values))
        key = {column: row[column] for column in KEY}
        sample_rows += [{**key, "sample": i, "ms": ms} for i, ms in enumerate(values)]
    del inputs
    torch.cuda.empty_cache()  # the point's inputs are gone: hand their memory back
    return [with_rates(row, ceilings) if ceilings else row for row in rows.values()], sample_rows
