"""The backward's correctness check: dQ, dK, dV of the kernel against float64 autograd.

The rule is the forward's (`minimodel.gpu.correctness.tolerance`), per gradient: on the same fresh
random inputs (Q, K, V and the output gradient dO),

    err_kernel <= max(1e-3, 2 × err_torch)

where err is the largest absolute difference from torch autograd through the float64 reference
(`reference_attn` on upcast inputs), and err_torch that of torch autograd through the same
reference in the inputs' own dtype. A case passes when all three gradients do, with no NaN.
The forward and its LSE come from `flash_attn_forward(..., return_lse=True)`, as the
differentiable entry point (`minimodel.kernel.attention`) saves them.

`run_backward_sweep` puts the correctness sweep's cases (`minimodel.gpu.correctness.sweep_cases`)
through it: the rows of correctness.csv with `direction` = backward. Under Triton's interpreter the
backward costs about three times the forward, so only the cases up to
`interpreter.backward_max_n` run there; `backward: false` leaves the backward out.
"""

from __future__ import annotations

import torch
from tqdm import tqdm

from minimodel import contract
from minimodel.cpu.references import reference_attn
from minimodel.gpu.correctness import sweep_cases, tolerance
from minimodel.kernel.backward import BwdConfig, default_bwd_config, flash_attn_backward
from minimodel.kernel.flash import flash_attn_forward, launch_config

GRADS = ("dq", "dk", "dv")


def reference_grads(q, k, v, do, causal: bool, sm_scale: float | None = None, upcast: bool = False):
    """(dQ, dK, dV) by torch autograd through `reference_attn`: in float64 with `upcast`, else in
    the inputs' dtype (PyTorch's own low-precision backward)."""
    leaves = [(t.detach().double() if upcast else t.detach().clone()).requires_grad_() for t in (q, k, v)]
    out = reference_attn(*leaves, causal=causal, sm_scale=sm_scale)
    out.backward(do.double() if upcast else do)
    return tuple(t.grad for t in leaves)


def random_inputs(B, H, N, d, dtype: torch.dtype, H_kv: int, device, layout: str, generator):
    """Q, K, V, dO from a standard normal; "bnhd": transposed views of (B, N, H, d) tensors."""
    def rand(heads):
        if layout == "bnhd":
            x = torch.randn(B, N, heads, d, generator=generator)
            return x.to(device=device, dtype=dtype).transpose(1, 2)
        return torch.randn(B, heads, N, d, generator=generator).to(device=device, dtype=dtype)

    return rand(H), rand(H_kv), rand(H_kv), rand(H)


def _error(got: torch.Tensor, exact: torch.Tensor) -> float:
    return (got.double() - exact).abs().max().item() if got.numel() else 0.0


def check_backward_case(B: int, H: int, N: int, d: int, causal: bool, dtype: str = "float16",
                        H_kv: int | None = None, device: str = "cuda", layout: str = "contiguous",
                        generator: torch.Generator | None = None, sm_scale: float | None = None,
                        config: BwdConfig | None = None) -> dict:
    """One case: each gradient's error against float64, the kernel's and PyTorch's, and the verdict.

    err_kernel_vs_fp64, err_torch_vs_fp64 and tolerance are those of the gradient nearest its
    tolerance (`worst`), so the row reads as a forward row does; err_<grad>_* give all three.
    path: the backward's kernel ("tl"); forward_path: the forward kernel whose O and LSE it took
    ("gluon" or "tl"); then the backward's tiles (`BwdConfig`).
    """
    H_kv = H_kv or H
    q, k, v, do = random_inputs(B, H, N, d, getattr(torch, dtype), H_kv, device, layout, generator)
    exact = reference_grads(q, k, v, do, causal, sm_scale, upcast=True)
    lowp = reference_grads(q, k, v, do, causal, sm_scale)
    o, lse = flash_attn_forward(q, k, v, causal=causal, sm_scale=sm_scale, return_lse=True)
    got = flash_attn_backward(q, k, v, o, lse, do, causal, sm_scale, config)
    cfg = config or default_bwd_config(q, causal)
    row = {"B": B, "H": H, "H_kv": H_kv, "N": N, "d": d, "causal": causal, "dtype": dtype, "layout": layout}
    row.update(grad_errors(got, exact, lowp))
    row.update({"skipped": False, "reason": "", "path": "tl",
                "forward_path": launch_config(q, k, v, causal).path, **cfg.as_dict()})
    return row


def grad_errors(got, exact, lowp) -> dict:
    """The rule on (dQ, dK, dV) `got` against float64 `exact`, with PyTorch's own `lowp`:
    err_<grad>_kernel_vs_fp64, err_<grad>_torch_vs_fp64 and tolerance_<grad> for each gradient, then
    those of the gradient nearest its tolerance (`worst`) without the name, has_nan and passed."""
    row, has_nan, passed, worst, worst_ratio = {}, False, True, GRADS[0], -1.0
    for name, g, e, t in zip(GRADS, got, exact, lowp, strict=True):
        err, err_torch = _error(g, e), _error(t, e)
        tol = tolerance(err_torch)
        row.update({f"err_{name}_kernel_vs_fp64": err, f"err_{name}_torch_vs_fp64": err_torch,
                    f"tolerance_{name}": tol})
        has_nan |= bool(torch.isnan(g).any())
        passed &= err <= tol
        if err / tol > worst_ratio:
            worst, worst_ratio = name, err / tol
    row.update({
        "worst": worst, "err_kernel_vs_fp64": row[f"err_{worst}_kernel_vs_fp64"],
        "err_torch_vs_fp64": row[f"err_{worst}_torch_vs_fp64"], "tolerance": row[f"tolerance_{worst}"],
        "has_nan": has_nan, "passed": (not has_nan) and passed,
    })
    return row


def backward_cases(cfg: dict, backend: str) -> list[dict]:
    """The sweep's cases the backward runs (`sweep_cases`, in its order, each with its index there,
    `index`): none with cfg['backward'] false; under the interpreter those with N <= backward_max_n."""
    if not cfg["backward"]:
        return []
    cases = [{**c, "index": i} for i, c in enumerate(sweep_cases(cfg, backend))]
    if backend == "interpreter":
        cases = [c for c in cases if c["N"] <= cfg["interpreter"]["backward_max_n"]]
    return cases


def run_backward_sweep(cfg: dict, backend: str, random_seed: int, progress=None) -> list[dict]:
    """The kernel's backward rows: every case of `backward_cases` on inputs drawn from `random_seed`
    (a generator of their own: the forward's rows keep their inputs)."""
    device = "cuda" if backend == "cuda" else "cpu"
    gen = torch.Generator().manual_seed(random_seed)
    rows = []
    for case in tqdm(backward_cases(cfg, backend), desc="correctness (backward)", file=progress,
                     mininterval=2):
        key = {k: case[k] for k in ("B", "H", "H_kv", "N", "d", "causal", "dtype")}
        if "skip" in case:
            rows.append({"impl": contract.TRITON, "direction": contract.BACKWARD, **key,
                         "group": case["group"], "skipped": True, "reason": case["skip"], "passed": None})
            continue
        row = check_backward_case(case["B"], case["H"], case["N"], case["d"], case["causal"], case["dtype"],
                                  H_kv=case["H_kv"], device=device, generator=gen)
        rows.append({"impl": contract.TRITON, "direction": contract.BACKWARD, **row, "group": case["group"]})
    return rows
