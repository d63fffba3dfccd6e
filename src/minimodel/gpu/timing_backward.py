"""GPU timing of the backward: the rows of timing.csv with `direction` = backward and fwd+bwd.

At every point of both grids (`minimodel.gpu.grids`), on the forward's inputs (the same seed) and
an output gradient dO drawn after them, each implementation with a backward is timed twice:
- `backward`: the backward alone, the forward's outputs saved. The kernel: `backward_fn` (the
  forward run once, O and LSE kept, then `flash_attn_backward` timed). Every other implementation
  through autograd: one forward on inputs that require grad, its graph kept, then
  `torch.autograd.grad(out, (q, k, v), do, retain_graph=True)` timed.
- `fwd+bwd`: the forward and the backward together, `torch.autograd.grad(fn(q, k, v), ...)` (the
  kernel through its differentiable entry point, `minimodel.kernel.attention`).
Times as the forward's (`minimodel.gpu.timing`): `ms` from CUDA-graph replays (`graph_ms`: the
call is built on the capturing stream, since autograd runs a backward on its forward's stream),
`eager_ms` from `triton.testing.do_bench`. FLOPs per FlashAttention's benchmarks
(`symbolic_backward.attention_flops`): backward = 2.5 × the forward's, fwd+bwd = 3.5 ×.

Each timed call is first run once on a poisoned allocator (a NaN-filled block of Q's size handed
back to the cache); the first head of its dQ, dK, dV is checked against float64 autograd on that
head with the correctness rule, per gradient (`minimodel.gpu.grads.grad_errors`): `checked`, and
`err_vs_fp64` of the gradient nearest its tolerance. Contenders with a backward (`backward: true`)
are timed the same way in their child process; the others get skipped rows saying so.
"""

from __future__ import annotations

import functools
import logging

import torch

from minimodel import contract, symbolic_backward
from minimodel.contenders import builtin
from minimodel.contenders.builtin import no_backward_reason
from minimodel.contenders.run import SKIPPED, TimingCase, timing_inputs
from minimodel.gpu import grads
from minimodel.gpu.timing_rows import contender_skip_reason, empty_row, failures_in_status, with_rates
from minimodel.kernel import attention, launch_config
from minimodel.kernel.backward import backward_fn, default_bwd_config
from minimodel.timers import autograd_call, measure

log = logging.getLogger(__name__)

DIRECTIONS = (contract.BACKWARD, contract.FWD_BWD)  # what this module times, in this order


def implementations(causal: bool) -> dict:
    """name -> fn(q, k, v), differentiable by autograd, of every implementation always timed:
    the kernel's differentiable entry point, naive and the SDPA backends (the built-in contenders')."""
    impls = {contract.TRITON: lambda q, k, v: attention(q, k, v, causal=causal)}
    impls.update({name: functools.partial(getattr(builtin, name), causal=causal)
                  for name in (contract.NAIVE, *contract.SDPA_BACKENDS)})
    return impls


def make_call(name: str, fn, q, k, v, do, causal: bool, direction: str):
    """The call timed for implementation `name` in `direction`; the kernel's backward alone is
    `backward_fn`, every other call goes through autograd on fresh leaves of q, k, v."""
    if name == contract.TRITON and direction == contract.BACKWARD:
        return backward_fn(q, k, v, causal, do=do)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    return autograd_call(fn, leaves, do, direction)


def one_head_grads(q, k, v, do, causal: bool):
    """(exact, lowp): float64 autograd's and PyTorch's own (fp16) dQ, dK, dV of the first head of the
    first batch element; (None, None) when even one head does not fit."""
    qs, ks, vs, dos = (t[:1, :1] for t in (q, k, v, do))
    try:
        return (grads.reference_grads(qs, ks, vs, dos, causal, upcast=True),
                grads.reference_grads(qs, ks, vs, dos, causal))
    except torch.OutOfMemoryError:
        return None, None


def check(row: dict, result: dict, exact, lowp) -> dict:
    """`checked` and `err_vs_fp64` of a measured row, from its gradients' first heads."""
    if exact is not None:
        verdict = grads.grad_errors([h.to(exact[0].device) for h in result["heads"]], exact, lowp)
        ok = verdict["passed"] and not result["has_nan"]
        row.update(checked=ok, err_vs_fp64=verdict["err_kernel_vs_fp64"])
        if not ok:
            row["status"] = "failed its correctness check"
    return row


def time_point(grid: str, B: int, H: int, N: int, d: int, causal: bool, impl_names, warmup_ms: float,
               rep_ms: float, ceilings: dict, random_seed: int, contenders=()) -> list[dict]:
    """The backward rows, then the fwd+bwd rows, of every implementation at one point, then each
    contender's (a `minimodel.contenders.run.Child`) in its own process."""
    q, k, v, do = timing_inputs(TimingCase(B, H, N, d, causal, random_seed, warmup_ms, rep_ms), 4)
    exact, lowp = one_head_grads(q, k, v, do, causal)
    point = {"grid": grid, "B": B, "H": H, "N": N, "d": d, "causal": causal}
    kernel = {"path": "tl", "forward_path": launch_config(q, k, v, causal).path,
              **{f"cfg_{key}": val for key, val in default_bwd_config(q, causal).as_dict().items()}}
    impls = implementations(causal)
    rows = []
    for direction in DIRECTIONS:
        flops = symbolic_backward.attention_flops(B, H, N, d, causal, direction)
        for name in impl_names:
            row = empty_row(point, name, flops, direction)
            if name == contract.TRITON:  # the backward's kernel and tiles, and the forward's kernel
                row.update(kernel)
            with failures_in_status(row):
                result = measure(functools.partial(make_call, name, impls[name], q, k, v, do, causal,
                                                   direction), q, warmup_ms, rep_ms)
                row.update({key: result[key] for key in ("ms", "eager_ms", "timing")})
                check(row, result, exact, lowp)
            rows.append(with_rates(row, ceilings))
        for child in contenders:
            row = empty_row(point, child.contender.name, flops, direction)
            rows.append(with_rates(time_contender(child, row, exact, lowp, random_seed, warmup_ms, rep_ms),
                                   ceilings))
    return rows


def time_contender(child, row: dict, exact, lowp, random_seed: int, warmup_ms: float, rep_ms: float) -> dict:
    """A contender's row at one point and direction (`row`, its empty timing row), timed in its child
    process on the same inputs (`minimodel.contenders.run.timed_backward`), checked here."""
    reason = no_backward_reason(child.contender) or contender_skip_reason(child.contender, row)
    if reason:
        return {**row, "status": f"{contract.SKIPPED}: {reason}"}
    case = TimingCase(row["B"], row["H"], row["N"], row["d"], row["causal"], random_seed, warmup_ms, rep_ms)
    status, result = child.call("time_backward", (case, row["direction"]))
    if status == SKIPPED:  # the contender declined this point
        return {**row, "status": f"{contract.SKIPPED}: {result}"}
    if status != "ok":
        return {**row, "status": f"failed: {result}"}
    row.update({key: result[key] for key in ("ms", "eager_ms", "timing")})
    return check(row, result, exact, lowp)
