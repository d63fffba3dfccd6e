"""A contender through the correctness rule: its output against float64 on the case's inputs.

The rule is the project kernel's (`minimodel.floor.correctness_rule`): err <= max(1e-3, 2 × err_torch),
where err_torch is PyTorch's own low-precision attention's error on the same inputs. A contender
that raises, hangs, returns the wrong shape or dtype, or NaN gets a failed row with the reason; one
that raises NotImplementedError declines the case, a skipped row with its message.

A contender with a backward (`backward: true`) also gets backward rows: dQ, dK, dV by autograd in
its child process, at an output gradient dO drawn from the case's seed, each against float64
autograd with the same rule (`minimodel.floor.correctness_rule`). An output autograd cannot differentiate (a
detached one, say) is a failed row saying so.
"""

from __future__ import annotations

import torch

from minimodel.contenders.run import SKIPPED, Case, Child, backward_inputs, inputs
from minimodel.contenders.spec import Contender
from minimodel.floor import contract
from minimodel.floor.attention_ref import reference_attn
from minimodel.floor.correctness_rule import failure_reason, grad_errors, reference_grads, tolerance


def case_row(contender: Contender, case: Case, direction: str = contract.FORWARD, **values) -> dict:
    """A correctness-table row of `contender` at `case`: the case's keys, then `values`."""
    return {"impl": contender.name, "direction": direction, "B": case.B, "H": case.H, "H_kv": case.H_kv,
            "N": case.N, "d": case.d, "causal": case.causal, "dtype": case.dtype, "layout": case.layout,
            **values}


def check_case(child: Child, case: Case) -> dict:
    """One row of the correctness table for the child's contender at `case`."""
    row = case_row(child.contender, case, skipped=False, reason="", has_nan=None, err_kernel_vs_fp64=None)
    q, k, v = inputs(case)
    exact = reference_attn(q, k, v, causal=case.causal, upcast=True).cpu()
    err_torch = (reference_attn(q, k, v, causal=case.causal).double().cpu() - exact).abs().max().item()
    row.update(err_torch_vs_fp64=err_torch, tolerance=tolerance(err_torch))
    status, out = child.call("output", case)
    if status == SKIPPED:  # the contender declined this case
        return case_row(child.contender, case, skipped=True, reason=out, passed=None)
    if status != contract.OK:
        return {**row, "passed": False, "reason": out}
    has_nan = bool(torch.isnan(out).any())
    err = (out.double() - exact).abs().max().item()
    row.update(has_nan=has_nan, err_kernel_vs_fp64=err)
    if has_nan:
        return {**row, "passed": False, "reason": "returned NaN"}
    if err > row["tolerance"]:
        reason = f"error {err:.3g} above the tolerance {row['tolerance']:.3g}"
        return {**row, "passed": False, "reason": reason}
    return {**row, "passed": True}


def check_backward_case(child: Child, case: Case) -> dict:
    """One backward row of the correctness table for the child's contender at `case`."""
    q, k, v, do = backward_inputs(case)
    exact = [g.cpu() for g in reference_grads(q, k, v, do, case.causal, upcast=True)]
    lowp = [g.cpu() for g in reference_grads(q, k, v, do, case.causal)]
    status, got = child.call("grads", case)
    if status == SKIPPED:
        return case_row(child.contender, case, contract.BACKWARD, skipped=True, reason=got, passed=None)
    if status != contract.OK:
        return case_row(child.contender, case, contract.BACKWARD, skipped=False, reason=got, has_nan=None,
                        err_kernel_vs_fp64=None, passed=False)
    errors = grad_errors(got, exact, lowp)
    return case_row(child.contender, case, contract.BACKWARD, skipped=False, reason=failure_reason(errors),
                    **errors)
