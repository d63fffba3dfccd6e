"""The backward's correctness check: dQ, dK, dV of the kernel against float64 autograd.

The rule is the forward's (`minimodel.correctness_rule`), per gradient: on the same fresh
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
from minimodel.correctness_rule import failure_reason, grad_errors, reference_grads
from minimodel.gpu.correctness import backward_cases
from minimodel.kernel.backward import BwdConfig, flash_attn_backward, launch_bwd_config
from minimodel.kernel.flash import flash_attn_forward, launch_config


def random_inputs(B, H, N, d, dtype: torch.dtype, H_kv: int, device, layout: str, generator):
    """Q, K, V, dO from a standard normal; "bnhd": transposed views of (B, N, H, d) tensors."""
    def rand(heads):
        if layout == "bnhd":
            x = torch.randn(B, N, heads, d, generator=generator)
            return x.to(device=device, dtype=dtype).transpose(1, 2)
        return torch.randn(B, heads, N, d, generator=generator).to(device=device, dtype=dtype)

    return rand(H), rand(H_kv), rand(H_kv), rand(H)



def check_backward_case(B: int, H: int, N: int, d: int, causal: bool, dtype: str = "float16",
                        H_kv: int | None = None, device: str = "cuda", layout: str = "contiguous",
                        generator: torch.Generator | None = None, sm_scale: float | None = None,
                        config: BwdConfig | None = None) -> dict:
    """One case: each gradient's error against float64, the kernel's and PyTorch's, and the verdict.

    err_kernel_vs_fp64, err_torch_vs_fp64 and tolerance are those of the gradient nearest its
    tolerance (`worst`), so the row reads as a forward row does; err_<grad>_* give all three.
    path: the backward's dK/dV kernel ("gluon" or "tl"); forward_path: the forward kernel whose O
    and LSE it took ("gluon" or "tl"); then the backward's tiles (`BwdConfig`).
    """
    H_kv = H_kv or H
    q, k, v, do = random_inputs(B, H, N, d, getattr(torch, dtype), H_kv, device, layout, generator)
    exact = reference_grads(q, k, v, do, causal, sm_scale, upcast=True)
    lowp = reference_grads(q, k, v, do, causal, sm_scale)
    o, lse = flash_attn_forward(q, k, v, causal=causal, sm_scale=sm_scale, return_lse=True)
    got = flash_attn_backward(q, k, v, o, lse, do, causal, sm_scale, config)
    cfg = launch_bwd_config(q, k, v, causal, config, do)  # what the call ran: Gluon or tl
    row = {"B": B, "H": H, "H_kv": H_kv, "N": N, "d": d, "causal": causal, "dtype": dtype, "layout": layout}
    row.update(grad_errors(got, exact, lowp))
    row.update({"skipped": False, "reason": failure_reason(row), "path": cfg.path,
                "forward_path": launch_config(q, k, v, causal).path, **cfg.as_dict()})
    return row




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
