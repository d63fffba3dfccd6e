"""The timing stage's compiles made ahead (rule `gpu_warm`), so that its own clock does not run
through them.

The timing stage prepares every implementation at every point before sampling it
(`minimodel.gpu.timing_point`), and a first call that compiles is part of that preparation:
FlexAttention's `torch.compile` took 118–150 s of the stage on the H200, the kernel's and
FA4's first compiles 12–54 s more (notes/timing.md). Those compiles land in the machine's
on-disk caches (Inductor's, Triton's), and a later process that makes the same first calls
finds them there: flex's 28 points took 20 s warm against 104–112 s cold, with bit-identical
outputs and gradients.

This stage makes those first calls: every pass of the timing stage (`timing.passes`), in its
order (dynamo makes N dynamic after the lab grid's second N, so another order would compile
other graphs), for the implementations whose first call compiles (`WARMED`: the kernel, and
each of the stage's contenders in its child process, as the stage calls them). Each call is
the stage's own preparation (`time_pass`) with the smallest budgets: one checked call, a CUDA
graph of one call, one sample, no eager time. The rows say what ran and how long each
preparation took; no time of theirs is a measurement (this stage runs beside
`gpu_correctness`, sharing its GPU), and nothing reads them but a person asking where the time
went.

The workflow runs it beside `gpu_correctness`, and `gpu_timing` and `gpu_bytes` after it, so
that its GPU work never lands inside a measurement (`workflow/rules/gpu.smk`).
"""

from __future__ import annotations

import dataclasses

from tqdm import tqdm

from minimodel.floor import contract
from minimodel.gpu import timing
from minimodel.gpu.implementations import Local, Remote
from minimodel.gpu.timing_point import Clock, time_pass

# Of the implementations always timed, those whose first call compiles: the kernel (Triton's JIT).
# Naive attention and SDPA's backends run PyTorch's own kernels, built with it.
WARMED = (contract.TRITON,)
# One sample's budget of a warm-up call, ms: its graph holds one call (`timers.Sampler`).
SAMPLE_MS = 1e-3
COLUMNS = (*contract.TIMING_KEY, "status", "checked", "seconds")


def first_calls(case):
    """A timing pass's case cut to its first calls: no eager time, no host cost, a graph of one
    call and no warm-up before its one sample."""
    return dataclasses.replace(case, rep_ms=None, host_cost=False, sample_ms=SAMPLE_MS, sample_warmup_ms=0.0)


def run(cfg: dict, random_seed: int, contenders=(), progress=None) -> dict:
    """Every timing pass's first calls of the kernel and `contenders` (each in its child), in the
    stage's order: {"rows": one per (pass, implementation), "seconds": by what they went on}."""
    clock = Clock()
    rows = []
    with timing.started(contenders, clock) as children:
        warmed = [Local(name) for name in WARMED] + [Remote(child) for child in children]
        for p, direction, case in tqdm(list(timing.passes(cfg, random_seed)), desc="warm", file=progress):
            spent = Clock()
            got, _ = time_pass(p, direction, warmed, first_calls(case), 1, None, spent)
            for row in got:
                row["seconds"] = round(spent[f"prepare {row['impl']}"] + spent[f"sample {row['impl']}"], 3)
                rows.append({column: row.get(column) for column in COLUMNS})
            clock.update(spent)
    timing.say_failures(children, rows, progress)
    return {"rows": rows, "seconds": {what: round(s, 1) for what, s in clock.most_common()}}


def no_gpu_rows(cfg: dict) -> list[dict]:
    """Without CUDA: one row per timing pass, saying that nothing was compiled."""
    return [{**dataclasses.asdict(p), "direction": direction, "impl": None, "status": contract.NO_GPU_WARM,
             "checked": None, "seconds": None} for p, direction, _ in timing.passes(cfg, 0)]
