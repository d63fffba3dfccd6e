"""What the GPU stages run at a point: every implementation behind one interface, the kernel
first.

An implementation answers, for every GPU stage:
- `runs_at(point, direction)`: None when it runs at that point in that pass, else why not (what
  it supports, whether it is installed here, the grids it is timed on, whether it has a
  backward), from `minimodel.contenders.catalog.runs_at`, the one place that says it; `point` is
  a timing `Point`, a correctness `Case` or a `catalog.Where`;
- for the timing stage, `prepare(case, direction, inputs)`: its call at the point, built once:
  one checked call (the first heads of its output or gradients, `measured["heads"]`, for the
  stage's float64 check), its eager time, its host cost where asked, a CUDA graph. It returns a
  `Prepared`, whose `sample()` takes one more sample, as often as the stage asks, and
  `release()` frees it. A point it declines raises `Declined`; a call that fails raises `Failed`
  (or the error itself: out of memory, an unsupported shape, which
  `timing_rows.failures_in_status` turns into a status);
- for the correctness stage, `check(case, direction, generator)`: its row of the correctness
  table at a case, and `skipped(case, direction, reason)`: the row of a case it does not run.

Two kinds: `Local`, run in the stage's own process (the kernel, naive PyTorch and SDPA's backends,
the implementations always timed; the kernel's correctness check), and `Remote`, a contender in
its child process (`minimodel.contenders.run.Child`, whose `minimodel.contenders.timed` tasks
prepare and sample it, and whose `output` and `grads` tasks `minimodel.contenders.check` judges).
The table names (`impl`: `triton`, `naive`, `sdpa_cudnn`, ...) are the contract's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from minimodel.contenders import builtin, catalog, check
from minimodel.contenders.run import SKIPPED, Case, Child
from minimodel.contenders.timed import TimingCase
from minimodel.floor import contract
from minimodel.floor.timers import Sampler, autograd_call, first_heads
from minimodel.gpu import kernel_check
from minimodel.gpu.timing_rows import Declined, Failed
from minimodel.kernel import attention, backward_fn, flash_attn_forward, launch_bwd_config, launch_config


@dataclass
class Prepared:
    """An implementation's call at one point, ready to sample: `measured` holds what preparing it
    found (heads, has_nan, eager_ms, host_ms, timing, and the kernel's path and tiles)."""

    measured: dict
    sample: Callable[[], float]
    release: Callable[[], None]


class Local:
    """One of the implementations always timed, run in the stage's process: the kernel (its own
    path, the backward alone through `backward_fn`), naive and SDPA's backends (the built-in
    contenders' functions, the backward through autograd). The kernel's is also the correctness
    stage's first implementation (`check`)."""

    def __init__(self, name: str):
        self.name = name
        self.contender = catalog.BUILTINS[name]

    def runs_at(self, point, direction: str) -> str | None:
        return catalog.runs_at(self.contender, point.where, direction)

    def check(self, case: Case, direction: str, generator) -> dict:
        """The kernel's correctness row at `case` (`kernel_check.check`): its inputs drawn one case
        after another from the stage's `generator`, one per pass."""
        return kernel_check.check(case, direction, generator)

    def skipped(self, case: Case, direction: str, reason: str) -> dict:
        key = {k: getattr(case, k) for k in ("B", "H", "H_kv", "N", "d", "causal", "dtype")}
        return {"impl": self.name, "direction": direction, **key, "skipped": True, "reason": reason,
                "passed": None}

    def stop(self) -> None:
        """Nothing to stop: it runs in the stage's process."""

    def _forward(self, q, k, v, causal: bool):
        """(fn(q, k, v), extra row columns): the kernel runs the configuration chosen for the whole
        problem (`launch_config`: TMA or not), also on the one-head slice it is checked on."""
        if self.name != contract.TRITON:
            return functools.partial(getattr(builtin, self.name), causal=causal), {}
        cfg = launch_config(q, k, v, causal)
        fn = lambda q, k, v: flash_attn_forward(q, k, v, causal=causal, config=cfg)
        return fn, {"path": cfg.language, **{f"cfg_{key}": val for key, val in cfg.as_dict().items()}}

    def _make(self, direction: str, inputs, causal: bool):
        """(make, like, extra) of a backward pass: `make()` builds the call of `direction` (dQ, dK,
        dV); `like` is Q."""
        q, k, v, do = inputs
        if self.name == contract.TRITON and direction == contract.BACKWARD:
            cfg = launch_bwd_config(q, k, v, causal, do=do)  # what the call runs
            extra = {"path": cfg.language, "forward_path": launch_config(q, k, v, causal).language,
                     **{f"cfg_{key}": val for key, val in cfg.as_dict().items()}}
            return (lambda: backward_fn(q, k, v, causal, do=do)), q, extra
        fn = (functools.partial(attention, causal=causal) if self.name == contract.TRITON
              else functools.partial(getattr(builtin, self.name), causal=causal))

        def make():
            leaves = [t.detach().requires_grad_() for t in (q, k, v)]
            return autograd_call(fn, leaves, do, direction)
        return make, q, {}

    def prepare(self, case: TimingCase, direction: str, inputs) -> Prepared:
        if direction == contract.FORWARD:  # checked on the first head: float64 of the whole batch won't fit
            fn, extra = self._forward(*inputs, case.causal)  # the kernel: the whole problem's configuration
            make = lambda: lambda: fn(*inputs)
            one = [t[:1, :1] for t in inputs]
            heads, has_nan = first_heads(lambda: fn(*one), one[0])
        else:
            make, like, extra = self._make(direction, inputs, case.causal)
            heads, has_nan = first_heads(make(), like)
        sampler = Sampler(make, case.sample_ms, case.warmup_ms, case.rep_ms, host_cost=case.host_cost)
        measured = {"heads": heads, "has_nan": has_nan, "eager_ms": sampler.eager_ms,
                    "host_ms": sampler.host_ms, "timing": sampler.timing, **extra}
        return Prepared(measured, functools.partial(sampler.sample, case.sample_warmup_ms), sampler.release)


class Remote:
    """A contender, timed in its child process (`Child`), on the inputs the child draws from the
    point's seed (the same the stage draws)."""

    def __init__(self, child: Child):
        self.child, self.contender, self.name = child, child.contender, child.contender.name

    def runs_at(self, point, direction: str) -> str | None:
        return catalog.runs_at(self.contender, point.where, direction)

    def check(self, case: Case, direction: str, generator=None) -> dict:
        """Its correctness row at `case`, its inputs drawn in the child from the case's seed."""
        if direction == contract.FORWARD:
            return check.check_case(self.child, case)
        return check.check_backward_case(self.child, case)

    def skipped(self, case: Case, direction: str, reason: str) -> dict:
        return check.case_row(self.contender, case, direction, skipped=True, reason=reason, passed=None)

    def stop(self) -> None:
        self.child.stop()

    def _call(self, task: str, payload=None):
        status, result = self.child.call(task, payload)
        if status == SKIPPED:  # the contender declined this point
            raise Declined(result)
        if status != contract.OK:
            raise Failed(result)
        return result

    def prepare(self, case: TimingCase, direction: str, inputs) -> Prepared:
        measured = self._call("prepare", (case, direction))
        return Prepared(measured, lambda: self._call("sample"), lambda: self.child.call("release", None))


def implementations(children=()) -> list:
    """Every implementation the stage can time: the ones always timed (the kernel first), then a
    `Remote` for each contender's child."""
    return [Local(name) for name in contract.IMPLEMENTATIONS] + [Remote(child) for child in children]
