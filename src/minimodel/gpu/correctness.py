"""The kernel's correctness sweep (notes/labs.md, lab 02 D), judged by `minimodel.correctness_rule`.

Lab 02's literal test ("max-abs-error < 1e-3 against the PyTorch reference in fp16") is
reported beside each case (`err_vs_torch_fp16`, `lab_literal_pass`); the verdict is the rule
against float64 that `minimodel.correctness_rule` states and says why.

Without a CUDA device the very same kernel runs under Triton's CPU interpreter on a smaller
grid (`backend: interpreter`). bf16 `tl.dot` gives wrong results under the interpreter
(Triton 3.6), so bf16 cases are skipped there with that reason.

These are the rows with `direction` = forward; the backward's rows of the same cases come from
`minimodel.gpu.grads` (the kernel's) and `run_contenders` (each contender's, after its forward
rows). `summarize` keeps the forward's verdict and puts the backward's beside it.
"""

from __future__ import annotations

import logging

import torch
from tqdm import tqdm

from minimodel import contract
from minimodel.attention_ref import reference_attn
from minimodel.contenders import check, registry, run
from minimodel.correctness_rule import ABS_FLOOR, TORCH_MULTIPLE, tolerance
from minimodel.kernel import (
    BF16_INTERPRETER_REASON,
    INTERPRETED,
    flash_attn_forward,
    launch_config,
)
from minimodel.provenance import machine

log = logging.getLogger(__name__)



def select_backend(require_cuda: bool = False) -> str:
    """"interpreter" when the kernel runs under Triton's CPU interpreter, else "cuda".

    `minimodel.kernel` made that choice when it was imported. With `require_cuda`, a machine
    without a usable GPU raises `machine.NoUsableGPU` instead.
    """
    if require_cuda:
        machine.require_cuda()
    return "interpreter" if INTERPRETED else "cuda"


def check_case(B: int, H: int, N: int, d: int, causal: bool, dtype: str = "float16",
               H_kv: int | None = None, device: str = "cuda", layout: str = "contiguous",
               generator: torch.Generator | None = None) -> dict:
    """One case on fresh random inputs: errors vs float64 of the kernel and of PyTorch fp16."""
    H_kv = H_kv or H
    tdtype = getattr(torch, dtype)

    def rand(heads):
        if layout == "bnhd":  # a transposed view of a (B, N, H, d) tensor: non-contiguous
            x = torch.randn(B, N, heads, d, generator=generator, device="cpu")
            return x.to(device=device, dtype=tdtype).transpose(1, 2)
        x = torch.randn(B, heads, N, d, generator=generator, device="cpu")
        return x.to(device=device, dtype=tdtype)

    Q, K, V = rand(H), rand(H_kv), rand(H_kv)
    exact = reference_attn(Q, K, V, causal=causal, upcast=True)
    torch_lowp = reference_attn(Q, K, V, causal=causal)
    out = flash_attn_forward(Q, K, V, causal=causal)
    has_nan = bool(torch.isnan(out).any())
    err_kernel = (out.double() - exact).abs().max().item() if out.numel() else 0.0
    err_torch = (torch_lowp.double() - exact).abs().max().item() if out.numel() else 0.0
    err_literal = (out.float() - torch_lowp.float()).abs().max().item() if out.numel() else 0.0
    tol = tolerance(err_torch)
    cfg = launch_config(Q, K, V, causal)
    return {
        "B": B, "H": H, "H_kv": H_kv, "N": N, "d": d, "causal": causal, "dtype": dtype,
        "layout": layout,
        "err_kernel_vs_fp64": err_kernel, "err_torch_vs_fp64": err_torch,
        "tolerance": tol, "err_vs_torch_fp16": err_literal,
        "lab_literal_pass": err_literal < ABS_FLOOR,
        "has_nan": has_nan, "passed": (not has_nan) and err_kernel <= tol,
        "skipped": False, "reason": "", "path": cfg.path,
        "BLOCK_M": cfg.BLOCK_M, "BLOCK_N": cfg.BLOCK_N,
        "num_warps": cfg.num_warps, "num_stages": cfg.num_stages, "TMA": cfg.TMA,
    }


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


def run_sweep(cfg: dict, backend: str, random_seed: int, progress=None) -> list[dict]:
    """Every case of `sweep_cases` on inputs drawn from `random_seed` (the config's)."""
    device = "cuda" if backend == "cuda" else "cpu"
    gen = torch.Generator()
    gen.manual_seed(random_seed)
    rows = []
    for case in tqdm(sweep_cases(cfg, backend), desc="correctness", file=progress, mininterval=2):
        if "skip" in case:
            key = {k: case[k] for k in ("B", "H", "H_kv", "N", "d", "causal", "dtype")}
            rows.append({"impl": contract.TRITON, "direction": contract.FORWARD, **key,
                         "group": case["group"], "skipped": True, "reason": case["skip"],
                         "passed": None})
            continue
        row = check_case(case["B"], case["H"], case["N"], case["d"], case["causal"],
                         case["dtype"], H_kv=case["H_kv"], device=device, generator=gen)
        row.update(impl=contract.TRITON, direction=contract.FORWARD, group=case["group"])
        rows.append(row)
        log.info("N=%d d=%d causal=%s %s: kernel %.2e, torch %.2e, %s", row["N"], row["d"],
                 row["causal"], row["dtype"], row["err_kernel_vs_fp64"],
                 row["err_torch_vs_fp64"], "pass" if row["passed"] else "FAIL")
    return rows


def backward_cases(cfg: dict, backend: str) -> list[dict]:
    """The sweep's cases the backward runs (`sweep_cases`, in its order, each with its index there,
    `index`): none with cfg['backward'] false; under the interpreter those with N <= backward_max_n."""
    if not cfg["backward"]:
        return []
    cases = [{**c, "index": i} for i, c in enumerate(sweep_cases(cfg, backend))]
    if backend == "interpreter":
        cases = [c for c in cases if c["N"] <= cfg["interpreter"]["backward_max_n"]]
    return cases


def run_contenders(cfg: dict, contenders, backend: str, random_seed: int, progress=None) -> list[dict]:
    """The sweep's cases for each contender, each in a child process (`minimodel.contenders`): its
    forward rows, then its backward rows (the kernel's backward cases, `backward_cases`;
    skipped rows saying so for a contender without a backward).

    A contender's inputs are drawn from random_seed + the case's index, the same for every
    contender and both directions. The interpreter's smaller grid applies; its bf16 skip only to
    Triton contenders.
    """
    device = "cuda" if backend == "cuda" else "cpu"

    def case(c, i):
        return run.Case(c["B"], c["H"], c["H_kv"], c["N"], c["d"], c["causal"], c["dtype"], device,
                        seed=random_seed + i)

    planned = sweep_cases(cfg, backend)
    backward = backward_cases(cfg, backend)
    cases = [case(c, i) for i, c in enumerate(planned)]
    rows, failures = [], []
    for contender in tqdm(contenders, desc="contenders", file=progress, disable=not contenders):
        found = check.sweep(contender, cases, registry.SEARCH, tolerance, backend == "interpreter",
                            backward=[case(c, c["index"]) for c in backward])
        rows += [{**row, "group": c["group"]} for row, c in zip(found, planned + backward, strict=True)]
        failures.append(run.failure_line(contender.name, [r["reason"] for r in found if r["passed"] is False],
                                         sum(not r["skipped"] for r in found), run.rule_log(), "cases"))
    for line in filter(None, failures):  # after the bar: one line each on the console, and in the log
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
