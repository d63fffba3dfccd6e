"""The correctness sweep (notes/labs.md, lab 02 D): the kernel, then each contender, in every pass,
against float64 by `minimodel.floor.correctness_rule`.

The cases (`sweep_cases`: the lab's grid, awkward N, other head dims, each dtype, grouped-query
heads; the backward's, `backward_cases`) are run by every implementation
(`minimodel.gpu.implementations`), the kernel first, in each pass (`direction`: the forward, and
with `backward` the backward): a case an implementation does not run (`runs_at`) is a skipped row
saying why, any other its check (`check`): the kernel's in this process
(`minimodel.gpu.kernel_check`), a contender's in its child (`minimodel.contenders.check`).

Without a CUDA device the very same kernel runs under Triton's CPU interpreter on a smaller
grid (`backend: interpreter`). bf16 `tl.dot` gives wrong results under the interpreter
(Triton 3.6), so bf16 cases are skipped there with that reason.

`summarize` keeps the kernel's forward verdict and puts the backward's beside it.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import torch
from tqdm import tqdm

from minimodel.contenders import registry
from minimodel.contenders.run import Case, Child, failure_line, rule_log
from minimodel.floor import contract
from minimodel.floor.correctness_rule import ABS_FLOOR, TORCH_MULTIPLE
from minimodel.floor.provenance import machine
from minimodel.gpu.correctness_plan import backward_cases, sweep_cases
from minimodel.gpu.implementations import Local, Remote
from minimodel.gpu.kernel_check import random_inputs
from minimodel.kernel import INTERPRETED

log = logging.getLogger(__name__)


def select_backend(require_cuda: bool = False) -> str:
    """"interpreter" when the kernel runs under Triton's CPU interpreter, else "cuda".

    `minimodel.kernel` made that choice when it was imported. With `require_cuda`, a machine
    without a usable GPU raises `machine.NoUsableGPU` instead.
    """
    if require_cuda:
        machine.require_cuda()
    return "interpreter" if INTERPRETED else "cuda"


class Planned(NamedTuple):
    """A case of the sweep in one pass: its `Case`, its group (`contract.LAB_CASES`, ...), why
    the kernel leaves it out (`skip`: a dtype the interpreter's sweep does not run), or None, and
    whether the stage's shard runs it (`selected`; `minimodel.gpu.shards`)."""

    case: Case
    group: str | None = None
    skip: str | None = None
    selected: bool = True


def plan(cfg: dict, backend: str, random_seed: int,
         selection: dict | None = None) -> dict[str, list[Planned]]:
    """direction -> its cases: `sweep_cases` forward, `backward_cases` backward, each case's seed
    random_seed + its index in `sweep_cases`; with a shard's `selection` (key -> value of a case:
    `group`, `direction`, `dtype`), those it leaves to other shards are not `selected`."""
    device = "cuda" if backend == "cuda" else "cpu"

    def planned(c, index, direction):
        case = Case(c["B"], c["H"], c["H_kv"], c["N"], c["d"], c["causal"], c["dtype"], device,
                        seed=random_seed + index)
        item = {**c, "direction": direction}
        selected = all(item[key] == value for key, value in (selection or {}).items())
        return Planned(case, c["group"], c.get("skip"), selected)

    forward, backward = contract.FORWARD, contract.BACKWARD
    return {forward: [planned(c, i, forward) for i, c in enumerate(sweep_cases(cfg, backend))],
            backward: [planned(c, c["index"], backward) for c in backward_cases(cfg, backend)]}


def rows_of(impl, planned: dict[str, list[Planned]], random_seed: int = 0, progress=None) -> list[dict]:
    """One implementation's rows (`minimodel.gpu.implementations`) at every selected case of each
    pass, in order: a skipped row where it does not run (`runs_at`, and for the kernel the plan's
    `skip`), else its check. The kernel draws its cases' inputs one after another from a generator
    seeded with `random_seed`, one per pass (those of a case another shard runs drawn and dropped,
    so that every case gets the inputs of the whole sweep); a contender, in its child, from each
    case's seed (the same for every contender and both passes). The implementation is stopped after."""
    rows = []
    try:
        for direction, cases in planned.items():
            generator = torch.Generator().manual_seed(random_seed)  # the kernel's inputs
            label = f"correctness {impl.name}" + (f" ({direction})" if direction != contract.FORWARD else "")
            mine = [p for p in cases if p.selected]
            bar = tqdm(total=len(mine), desc=label, file=progress, mininterval=2, disable=not mine)
            for case, group, skip, selected in cases:
                why = (skip if isinstance(impl, Local) else None) or impl.runs_at(case, direction)
                if not selected:
                    if isinstance(impl, Local) and not why:
                        _draw(case, direction, generator)
                    continue
                row = impl.skipped(case, direction, why) if why else impl.check(case, direction, generator)
                rows.append(row if group is None else {**row, "group": group})
                verdict = contract.SKIPPED if why else "pass" if row["passed"] else "FAIL"
                log.info("%s %s N=%d d=%d causal=%s %s: %s", impl.name, direction, case.N, case.d,
                         case.causal, case.dtype, verdict)
                bar.update()
            bar.close()
    finally:
        impl.stop()
    return rows


def _draw(case: Case, direction: str, generator: torch.Generator) -> None:
    """The kernel's inputs of `case` drawn from `generator` and dropped, on the CPU: the draws its
    check would make (`kernel_check.random_inputs`: Q, K, V, and a backward's dO)."""
    count = 3 if direction == contract.FORWARD else 4
    random_inputs(case.B, case.H, case.N, case.d, torch.float32, case.H_kv, "cpu", "contiguous", generator,
                  count)


def order(planned: dict[str, list[Planned]]) -> list[tuple[int, int]]:
    """(pass, position in its pass) of each row `rows_of` gives for one implementation, in order:
    where it stands among the whole sweep's rows of that implementation."""
    return [(rank, position) for rank, cases in enumerate(planned.values())
            for position, planned_case in enumerate(cases) if planned_case.selected]


def run(cfg: dict, backend: str, random_seed: int, contenders=(), progress=None) -> list[dict]:
    """Every row of the sweep (`plan`): the kernel's (`rows_of`), then each contender's
    (`contender_rows`), each its forward rows, then its backward rows. The interpreter's smaller
    grid applies to all; the dtypes it leaves out to the kernel only."""
    return run_shard(cfg, backend, random_seed, contenders, progress)[0]


def run_shard(cfg: dict, backend: str, random_seed: int, contenders=(), progress=None,
              selection: dict | None = None) -> tuple[list[dict], list[tuple[int, int, int]]]:
    """The rows of a shard's `selection` of the sweep (`run`'s, all of them without one) and,
    beside them, where each stands in the whole sweep's table (implementation, pass, case: the
    gather of the shards orders their rows by it, `minimodel.gpu.shards`)."""
    planned = plan(cfg, backend, random_seed, selection)
    rows = rows_of(Local(contract.TRITON), planned, random_seed, progress)  # the rule fails on its failures
    rows += contender_rows(contenders, planned, random_seed, progress)
    each = order(planned)
    return rows, [(impl, *at) for impl in range(1 + len(contenders)) for at in each]


def contender_rows(contenders, planned: dict[str, list[Planned]], random_seed: int,
                   progress=None) -> list[dict]:
    """Each contender's rows (`minimodel.contenders.Contender`, each in a child process), and, after
    them, one line on the console for each that failed a case, naming the log its output went to:
    a contender that fails never fails the rule."""
    rows, failures = [], []
    for contender in contenders:
        mine = rows_of(Remote(Child(contender, registry.SEARCH)), planned, random_seed, progress)
        failures.append(failure_line(contender.name, [r["reason"] for r in mine if r["passed"] is False],
                                     sum(not r["skipped"] for r in mine), rule_log(), "cases"))
        rows += mine
    for line in filter(None, failures):  # after the bars: one line each on the console, and in the log
        print(line, file=progress)
    return rows


def _verdict(kernel: list[dict]) -> dict:
    ran = [r for r in kernel if not r.get("skipped")]
    failed = [r for r in ran if not r["passed"]]
    return {"cases": len(kernel), "ran": len(ran), "skipped": len(kernel) - len(ran),
            "failed": len(failed), "all_passed": not failed and bool(ran)}, ran


def _counts(rows: list[dict]) -> dict:
    contenders = {}
    for r in rows:
        counts = contenders.setdefault(r["impl"], {"passed": 0, "failed": 0, "skipped": 0})
        counts["skipped" if r["skipped"] else "passed" if r["passed"] else "failed"] += 1
    return contenders


def summarize(rows: list[dict], backend: str, random_seed: int, device_l2_bytes: int | None = None) -> dict:
    """The kernel's forward verdict (its rows) and each contender's forward counts beside it; then
    the same of the backward (`backward`: None where the sweep ran no backward). `device_l2_bytes`:
    the L2 of the device the rows ran on (a gather of shards runs where there may be none); by
    default this process's device's, on CUDA."""
    def direction(r):
        return r.get("direction", contract.FORWARD)

    def kernel(r):
        return r.get("impl", contract.TRITON) == contract.TRITON

    forward = [r for r in rows if direction(r) == contract.FORWARD]
    verdict, ran = _verdict([r for r in forward if kernel(r)])
    summary = {
        "backend": backend,
        "random_seed": random_seed,
        "rule": f"err_kernel_vs_fp64 <= max({ABS_FLOOR}, {TORCH_MULTIPLE} * err_torch_vs_fp64)",
        **verdict,
        "max_err_kernel_vs_fp64": max((r["err_kernel_vs_fp64"] for r in ran), default=None),
        "max_err_torch_vs_fp64": max((r["err_torch_vs_fp64"] for r in ran), default=None),
        "max_err_vs_torch_fp16": max((r["err_vs_torch_fp16"] for r in ran), default=None),
        "lab_literal_all_pass": all(r["lab_literal_pass"] for r in ran),
        "device_l2_bytes": (device_l2_bytes if device_l2_bytes is not None
                            else machine.device_l2_bytes() if backend == "cuda" else None),
        "contenders": _counts([r for r in forward if not kernel(r)]),
    }
    backward = [r for r in rows if direction(r) == contract.BACKWARD]
    summary["backward"] = None
    if backward:
        verdict, ran = _verdict([r for r in backward if kernel(r)])
        summary["backward"] = {
            "rule": "each of dq, dk, dv: err_<grad>_kernel_vs_fp64 <= max("
                    f"{ABS_FLOOR}, {TORCH_MULTIPLE} * err_<grad>_torch_vs_fp64)",
            **verdict,
            **{f"max_err_{g}_kernel_vs_fp64": max((r[f"err_{g}_kernel_vs_fp64"] for r in ran), default=None)
               for g in ("dq", "dk", "dv")},
            "contenders": _counts([r for r in backward if not kernel(r)]),
        }
    summary["cases_detail"] = rows  # the kernel's cases, then each contender's
    return summary
