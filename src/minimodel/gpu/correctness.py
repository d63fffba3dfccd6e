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
from minimodel.gpu.implementations import Local, Remote
from minimodel.kernel import BF16_INTERPRETER_REASON, INTERPRETED

log = logging.getLogger(__name__)


def select_backend(require_cuda: bool = False) -> str:
    """"interpreter" when the kernel runs under Triton's CPU interpreter, else "cuda".

    `minimodel.kernel` made that choice when it was imported. With `require_cuda`, a machine
    without a usable GPU raises `machine.NoUsableGPU` instead.
    """
    if require_cuda:
        machine.require_cuda()
    return "interpreter" if INTERPRETED else "cuda"


def sweep_cases(cfg: dict, backend: str) -> list[dict]:
    """The cases of the sweep: the lab's grid, awkward N, other head dims, each dtype, then the
    grouped-query cases (K and V with `gqa_kv_heads` heads).

    Under the interpreter the grid shrinks to cfg['interpreter'] (batch, heads, N <= max_n).
    """
    if backend == "interpreter":
        small = cfg["interpreter"]
        B, H, max_n, dtypes = small["batch"], small["heads"], small["max_n"], cfg["dtypes"]
        run_dtypes = set(small["dtypes"])
    else:
        B, H, max_n, dtypes = cfg["batch"], cfg["heads"], None, cfg["dtypes"]
        run_dtypes = set(dtypes)
    cases = []
    H_kv = cfg.get("gqa_kv_heads", 1)
    if H % H_kv:
        raise ValueError(f"gpu.correctness.gqa_kv_heads is {H_kv}, which does not divide the {H} query "
                         f"heads of the {backend} sweep; accepted: a divisor of {H}")
    shapes = [(n, cfg["head_dim"], H, contract.LAB_CASES) for n in cfg["n"]]
    shapes += [(n, cfg["head_dim"], H, contract.AWKWARD_CASES) for n in cfg["awkward_n"]]
    shapes += [(cfg["other_head_dims_n"], hd, H, contract.HEAD_DIM_CASES) for hd in cfg["other_head_dims"]]
    grouped = [(n, cfg["head_dim"], H_kv, contract.GQA_CASES) for n in cfg.get("gqa_n", ())]
    # the grouped cases come last, so every other case keeps the inputs it was drawn before them
    planned = [(t, s) for t in dtypes for s in shapes] + [(t, s) for t in dtypes for s in grouped]
    for dtype, (n, d, heads_kv, group) in planned:
        if max_n is not None and n > max_n:
            continue
        for causal in (False, True):
            case = {"B": B, "H": H, "H_kv": heads_kv, "N": n, "d": d, "causal": causal, "dtype": dtype,
                    "group": group}
            if dtype not in run_dtypes:
                case["skip"] = (BF16_INTERPRETER_REASON if dtype == "bfloat16"
                                else "not in the interpreter's dtypes")
            cases.append(case)
    return cases


def backward_cases(cfg: dict, backend: str) -> list[dict]:
    """The sweep's cases the backward runs (`sweep_cases`, in its order, each with its index there,
    `index`): none with cfg['backward'] false; under the interpreter those with N <= backward_max_n."""
    if not cfg["backward"]:
        return []
    cases = [{**c, "index": i} for i, c in enumerate(sweep_cases(cfg, backend))]
    if backend == "interpreter":
        cases = [c for c in cases if c["N"] <= cfg["interpreter"]["backward_max_n"]]
    return cases


class Planned(NamedTuple):
    """A case of the sweep in one pass: its `Case`, its group (`contract.LAB_CASES`, ...), and why
    the kernel leaves it out (`skip`: a dtype the interpreter's sweep does not run), or None."""

    case: Case
    group: str | None = None
    skip: str | None = None


def plan(cfg: dict, backend: str, random_seed: int) -> dict[str, list[Planned]]:
    """direction -> its cases: `sweep_cases` forward, `backward_cases` backward, each case's seed
    random_seed + its index in `sweep_cases`."""
    device = "cuda" if backend == "cuda" else "cpu"

    def planned(c, index):
        case = Case(c["B"], c["H"], c["H_kv"], c["N"], c["d"], c["causal"], c["dtype"], device,
                        seed=random_seed + index)
        return Planned(case, c["group"], c.get("skip"))

    return {contract.FORWARD: [planned(c, i) for i, c in enumerate(sweep_cases(cfg, backend))],
            contract.BACKWARD: [planned(c, c["index"]) for c in backward_cases(cfg, backend)]}


def rows_of(impl, planned: dict[str, list[Planned]], random_seed: int = 0, progress=None) -> list[dict]:
    """One implementation's rows (`minimodel.gpu.implementations`) at every planned case of each
    pass, in order: a skipped row where it does not run (`runs_at`, and for the kernel the plan's
    `skip`), else its check. The kernel draws its cases' inputs one after another from a generator
    seeded with `random_seed`, one per pass; a contender, in its child, from each case's seed (the
    same for every contender and both passes). The implementation is stopped after."""
    rows = []
    try:
        for direction, cases in planned.items():
            generator = torch.Generator().manual_seed(random_seed)  # the kernel's inputs
            label = f"correctness {impl.name}" + (f" ({direction})" if direction != contract.FORWARD else "")
            for case, group, skip in tqdm(cases, desc=label, file=progress, mininterval=2, disable=not cases):
                why = (skip if isinstance(impl, Local) else None) or impl.runs_at(case, direction)
                row = impl.skipped(case, direction, why) if why else impl.check(case, direction, generator)
                rows.append(row if group is None else {**row, "group": group})
                verdict = contract.SKIPPED if why else "pass" if row["passed"] else "FAIL"
                log.info("%s %s N=%d d=%d causal=%s %s: %s", impl.name, direction, case.N, case.d,
                         case.causal, case.dtype, verdict)
    finally:
        impl.stop()
    return rows


def run(cfg: dict, backend: str, random_seed: int, contenders=(), progress=None) -> list[dict]:
    """Every row of the sweep (`plan`): the kernel's (`rows_of`), then each contender's
    (`contender_rows`), each its forward rows, then its backward rows. The interpreter's smaller
    grid applies to all; the dtypes it leaves out to the kernel only."""
    planned = plan(cfg, backend, random_seed)
    rows = rows_of(Local(contract.TRITON), planned, random_seed, progress)  # the rule fails on its failures
    return rows + contender_rows(contenders, planned, random_seed, progress)


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


def summarize(rows: list[dict], backend: str, random_seed: int) -> dict:
    """The kernel's forward verdict (its rows) and each contender's forward counts beside it; then
    the same of the backward (`backward`: None where the sweep ran no backward)."""
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
        "device_l2_bytes": machine.device_l2_bytes() if backend == "cuda" else None,
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
