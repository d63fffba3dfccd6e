"""The kernel's correctness check, in each pass, judged by `minimodel.floor.correctness_rule`: one case
on fresh random inputs, the kernel's errors against float64 beside PyTorch's own.

- the forward (`check_case`): O against the float64 reference (`reference_attn` on upcast
  inputs). Lab 02's literal test ("max-abs-error < 1e-3 against the PyTorch reference in fp16")
  is reported beside it (`err_vs_torch_fp16`, `lab_literal_pass`); the verdict is the rule;
- the backward (`check_backward_case`): dQ, dK, dV against float64 autograd, each by the same
  rule, err_kernel <= max(1e-3, 2 × err_torch), where err_torch is that of torch autograd through
  the same reference in the inputs' own dtype. A case passes when all three gradients do, with no
  NaN. The forward and its LSE come from `flash_attn_forward(..., return_lse=True)`, as the
  differentiable entry point (`minimodel.kernel.attention`) saves them.

`check(case, direction, generator)` is the pass as a parameter, what the correctness stage calls
through `minimodel.gpu.implementations.Local`. Both record the configuration the kernel ran
(`path`: "tl" or "gluon", as every table says it; its variant and tiles).
"""

from __future__ import annotations

import torch

from minimodel.floor import contract
from minimodel.floor.attention_ref import reference_attn
from minimodel.floor.correctness_rule import (
    ABS_FLOOR,
    failure_reason,
    grad_errors,
    reference_grads,
    tolerance,
)
from minimodel.kernel import (
    BwdConfig,
    flash_attn_backward,
    flash_attn_forward,
    launch_bwd_config,
    launch_config,
)


def random_inputs(B, H, N, d, dtype: torch.dtype, H_kv: int, device, layout: str, generator, count: int = 4):
    """Q, K, V, dO from a standard normal (the first `count` of them); "bnhd": transposed views of
    (B, N, H, d) tensors."""
    def rand(heads):
        if layout == "bnhd":
            x = torch.randn(B, N, heads, d, generator=generator)
            return x.to(device=device, dtype=dtype).transpose(1, 2)
        return torch.randn(B, heads, N, d, generator=generator).to(device=device, dtype=dtype)

    return tuple(rand(heads) for heads in (H, H_kv, H_kv, H)[:count])


def check_case(B: int, H: int, N: int, d: int, causal: bool, dtype: str = "float16",
               H_kv: int | None = None, device: str = "cuda", layout: str = "contiguous",
               generator: torch.Generator | None = None) -> dict:
    """One forward case: errors vs float64 of the kernel and of PyTorch fp16."""
    H_kv = H_kv or H
    Q, K, V = random_inputs(B, H, N, d, getattr(torch, dtype), H_kv, device, layout, generator, 3)
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
        "skipped": False, "reason": "", "path": cfg.language,
        "BLOCK_M": cfg.BLOCK_M, "BLOCK_N": cfg.BLOCK_N,
        "num_warps": cfg.num_warps, "num_stages": cfg.num_stages, "TMA": cfg.TMA,
    }


def check_backward_case(B: int, H: int, N: int, d: int, causal: bool, dtype: str = "float16",
                        H_kv: int | None = None, device: str = "cuda", layout: str = "contiguous",
                        generator: torch.Generator | None = None, sm_scale: float | None = None,
                        config: BwdConfig | None = None) -> dict:
    """One backward case: each gradient's error against float64, the kernel's and PyTorch's, and the verdict.

    err_kernel_vs_fp64, err_torch_vs_fp64 and tolerance are those of the gradient nearest its
    tolerance (`worst`), so the row reads as a forward row does; err_<grad>_* give all three.
    path: the backward's dK/dV kernel's language (`BwdConfig.language`: "tl" or "gluon");
    forward_path: that of the forward whose O and LSE it took (`FwdConfig.language`); then the
    backward's configuration (`BwdConfig`: its dkdv, dq, tiles and warps).
    """
    H_kv = H_kv or H
    q, k, v, do = random_inputs(B, H, N, d, getattr(torch, dtype), H_kv, device, layout, generator)
    exact = reference_grads(q, k, v, do, causal, sm_scale, upcast=True)
    lowp = reference_grads(q, k, v, do, causal, sm_scale)
    o, lse = flash_attn_forward(q, k, v, causal=causal, sm_scale=sm_scale, return_lse=True)
    got = flash_attn_backward(q, k, v, o, lse, do, causal, sm_scale, config)
    cfg = launch_bwd_config(q, k, v, causal, config, do)  # what the call ran
    row = {"B": B, "H": H, "H_kv": H_kv, "N": N, "d": d, "causal": causal, "dtype": dtype, "layout": layout}
    row.update(grad_errors(got, exact, lowp))
    row.update({"skipped": False, "reason": failure_reason(row), "path": cfg.language,
                "forward_path": launch_config(q, k, v, causal).language, **cfg.as_dict()})
    return row


def check(case, direction: str, generator: torch.Generator) -> dict:
    """The kernel's row at `case` (a `minimodel.contenders.run.Case`) in `direction`, its inputs
    drawn from `generator`, with `impl` and `direction`."""
    one = check_case if direction == contract.FORWARD else check_backward_case
    row = one(case.B, case.H, case.N, case.d, case.causal, case.dtype, H_kv=case.H_kv, device=case.device,
              generator=generator)
    if direction == contract.FORWARD:
        return {**row, "impl": contract.TRITON, "direction": direction}
    return {"impl": contract.TRITON, "direction": direction, **row}
