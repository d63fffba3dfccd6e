"""A contender's call at one timing point, in its child process: prepared once, then sampled.

The timing stage (`minimodel.gpu.timing`) times every implementation at a point in rounds: each
round takes one sample of each, in a shuffled order, so that clock and thermal drift land on all
of them alike. A contender's part of that is three tasks of its child (`minimodel.contenders.run`):
- `prepare` (a `TimingCase` and a pass): draws the point's inputs from its seed (the stage draws
  the very same for its float64 reference), makes one checked call on a poisoned allocator (the
  first head of its output, or of its gradients, comes back for the check), then builds a
  `minimodel.floor.timers.Sampler`: its eager time, its host cost where asked, a CUDA graph;
- `sample`: one sample of the prepared call, in ms;
- `release`: frees it (the next point's inputs get the memory).
One call is prepared at a time in a child: a second `prepare` releases the first.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from minimodel.contenders.spec import SequenceFirst, prepared
from minimodel.floor import contract
from minimodel.floor.timers import Sampler, autograd_call, first_heads


@dataclass(frozen=True)
class TimingCase:
    """One timing point on the GPU: fp16 inputs drawn on the device from `seed`; the eager time's
    budgets (`warmup_ms`, `rep_ms`; without `rep_ms`, no eager time is taken) and one sample's
    (`sample_ms`)."""

    B: int
    H: int
    N: int
    d: int
    causal: bool
    seed: int
    warmup_ms: float
    rep_ms: float | None
    sample_ms: float = 40.0
    host_cost: bool = False  # also read the host's cost per call (`timers.host_ms`)
    sample_warmup_ms: float = 0.0  # untimed replays before each sample (`timers.Sampler.sample`)


def timing_inputs(case: TimingCase, count: int = 3) -> tuple[torch.Tensor, ...]:
    """Q, K, V of a timing point, the same in every process (the timing stage draws these too);
    with count=4 the output gradient dO too, drawn after them."""
    gen = torch.Generator(device="cuda").manual_seed(case.seed)
    return tuple(torch.randn(case.B, case.H, case.N, case.d, device="cuda", dtype=torch.float16,
                             generator=gen) for _ in range(count))


class ContenderOutputError(TypeError):
    """What a contender returned is not what the stage asks for; its message says what it should be."""


def validated(out, q: torch.Tensor) -> torch.Tensor:
    """`out` when it is a tensor of q's shape and dtype; else ContenderOutputError naming both."""
    if not isinstance(out, torch.Tensor):
        raise ContenderOutputError(f"returned {type(out).__name__}, not a tensor")
    if tuple(out.shape) != tuple(q.shape):
        raise ContenderOutputError(f"returned shape {tuple(out.shape)}; expected q's shape {tuple(q.shape)}")
    if out.dtype != q.dtype:
        raise ContenderOutputError(f"returned dtype {str(out.dtype).removeprefix('torch.')}; expected q's "
                                   f"dtype {str(q.dtype).removeprefix('torch.')}")
    return out


def maker(fn, case: TimingCase, direction: str):
    """(make, like, bnhd): `make()` builds the contender's call of `direction` at the case's inputs
    (the forward's: fn(q, k, v); a backward's: dQ, dK, dV through autograd), `like` is Q (the
    poison's size), bnhd whether the gradients come back in (B, N, H, d)."""
    if direction == contract.FORWARD:
        q, k, v = timing_inputs(case)
        args = prepared(fn, q, k, v)  # its layout, before anything is timed
        return (lambda: lambda: validated(fn(*args, causal=case.causal), q)), q, False
    q, k, v, do = timing_inputs(case, 4)
    leaves = [t.requires_grad_() for t in prepared(fn, q, k, v)]
    forward = lambda *xs: validated(fn(*xs, causal=case.causal), q)
    return (lambda: autograd_call(forward, leaves, do, direction)), q, isinstance(fn, SequenceFirst)


_PREPARED: dict = {}  # the prepared call ("call", a Sampler) and its samples' warm-up


def prepare(fn, payload) -> dict:
    """payload (TimingCase, direction): the checked call's first heads, then the prepared sampler's
    eager time, host cost and timing kind."""
    release(fn, None)
    case, direction = payload
    make, like, bnhd = maker(fn, case, direction)
    heads, has_nan = first_heads(make(), like, bnhd)
    sampler = Sampler(make, case.sample_ms, case.warmup_ms, case.rep_ms,
                      host_cost=case.host_cost and direction == contract.FORWARD)
    _PREPARED["call"], _PREPARED["warmup_ms"] = sampler, case.sample_warmup_ms
    return {"heads": heads, "has_nan": has_nan, "eager_ms": sampler.eager_ms, "host_ms": sampler.host_ms,
            "timing": sampler.timing}


def sample(fn, payload) -> float:
    """One sample of the prepared call, in ms."""
    if "call" not in _PREPARED:
        raise RuntimeError("sample asked before prepare")
    return _PREPARED["call"].sample(_PREPARED["warmup_ms"])


def release(fn, payload) -> None:
    if "call" in _PREPARED:
        _PREPARED["call"].release()
    _PREPARED.clear()
    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()


TASKS = {"prepare": prepare, "sample": sample, "release": release}
