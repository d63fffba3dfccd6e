"""The timing stage's compiles made ahead (rule `gpu_warm`), so that its own clock does not run
through them.

The timing stage prepares every implementation at every point before sampling it
(`minimodel.gpu.timing_point`), and a first call that compiles is part of that preparation:
FlexAttention's `torch.compile` took 118–150 s of the stage on the H200, the kernel's and
FA4's first compiles about 40 s more each when the correctness stage has not run before it
(notes/timing.md). Those compiles land in the machine's
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

The workflow runs it beside `gpu_correctness`, `gpu_timing` after it, and `gpu_bytes` never
beside it, before or after (`gpu_measure`; no edge joins them, so forcing the warm-up does not
make the DRAM counts again), so that its GPU work never lands inside a measurement
(`workflow/rules/gpu.smk`). What raises outside a row stops the warm-up but not the run (`run`).
"""

from __future__ import annotations

import dataclasses
import traceback

from tqdm import tqdm

from minimodel.floor import contract
from minimodel.gpu import timing
from minimodel.gpu.grids import WARM_COLUMNS, unwarmed_row
from minimodel.gpu.implementations import Local, Remote
from minimodel.gpu.timing_point import Clock, time_pass

# Of the implementations always timed, those whose first call compiles: the kernel (Triton's JIT).
# Naive attention and SDPA's backends run PyTorch's own kernels, built with it.
WARMED = (contract.TRITON,)
# One sample's budget of a warm-up call, ms: its graph holds one call (`timers.Sampler`).
SAMPLE_MS = 1e-3


def first_calls(case):
    """A timing pass's case cut to its first calls: no eager time, no host cost, a graph of one
    call and no warm-up before its one sample."""
    return dataclasses.replace(case, rep_ms=None, host_cost=False, sample_ms=SAMPLE_MS, sample_warmup_ms=0.0)


def run(cfg: dict, random_seed: int, contenders=(), progress=None) -> dict:
    """Every timing pass's first calls of the kernel and `contenders` (each in its child), in the
    stage's order: {"rows": one per (pass, implementation), "seconds": by what they went on}.

    An implementation's failure at a pass is its row's status, as in the timing stage. What raises
    outside a row (a contender's child that does not start, a pass's inputs) stops the warm-up but
    fails nothing: the warm-up only saves the timing stage time, and that stage compiles what was
    not compiled ahead. The rows made are kept, each pass not warmed gets one row saying why, the
    result's "stopped" says so too, and the traceback goes to the log (stderr)."""
    clock = Clock()
    rows = []
    passes = list(timing.passes(cfg, random_seed))
    done = 0
    result = {}
    try:
        with timing.started(contenders, clock) as children:
            warmed = [Local(name) for name in WARMED] + [Remote(child) for child in children]
            for p, direction, case in tqdm(passes, desc="warm", file=progress):
                spent = Clock()
                got, _ = time_pass(p, direction, warmed, first_calls(case), 1, None, spent)
                for row in got:
                    impl = row["impl"]
                    row["seconds"] = round(spent[f"prepare {impl}"] + spent[f"sample {impl}"], 3)
                    rows.append({column: row.get(column) for column in WARM_COLUMNS})
                clock.update(spent)
                done += 1
            timing.say_failures(children, rows, progress)
    except Exception as err:  # any error: the warm-up only saves time
        traceback.print_exc()
        reason = f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0]}"
        result["stopped"] = f"{contract.FAILED}: the warm-up stopped at this pass ({reason})"
        rows += [unwarmed_row(p, direction, result["stopped"]) for p, direction, _ in passes[done:]]
        print(f"gpu_warm stopped after {done} of {len(passes)} passes ({reason}); the timing stage "
              "compiles the rest itself (the traceback is in the rule's log)", file=progress)
    return {"rows": rows, "seconds": {what: round(s, 1) for what, s in clock.most_common()}, **result}
