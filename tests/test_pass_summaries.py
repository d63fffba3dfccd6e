"""Every pass where people read: a contender that fails its gradients is said to fail, in the run's
README and on the report's first page, never summarised as passing over its forward's count.

The contender's rows are made as the correctness stage makes them (`contenders.check`), its calls
run in this process rather than in a child (`InProcess`): the forward runs under `torch.no_grad`, so
its output passes and autograd cannot differentiate it.
"""

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from docutils.core import publish_parts

from minimodel.contenders import check, run
from minimodel.contenders.run import Case
from minimodel.contenders.spec import Contender
from minimodel.floor import contract
from minimodel.report import results_readme

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "results" / "reference" / "nvidia-h200"
PAGES = ROOT / "workflow" / "report"
pytestmark = pytest.mark.skipif(not (REF / contract.CORRECTNESS_SUMMARY).exists(),
                                reason="no reference run committed")


def nograd(q, k, v, causal=False):
    with torch.no_grad():
        return torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                                is_causal=causal).to(q.dtype)


class InProcess:
    """`run.Child`'s `call`, in this process: the task's result, or the error as the child sends it."""

    def __init__(self, contender, fn):
        self.contender, self.fn = contender, fn

    def call(self, task, case):
        try:
            return "ok", run.TASKS[task](self.fn, case)
        except Exception as err:  # as the child: one line, where the contender's code raised
            return "error", run.one_line(err) + run.where(err)


def nograd_rows() -> list[dict]:
    child = InProcess(Contender("nograd", "m:nograd", backward=True), nograd)
    cases = [Case(1, 2, 2, n, 32, causal, "float16", "cpu", seed=i)
             for i, (n, causal) in enumerate((n, c) for n in (33, 64) for c in (False, True))]
    skipped = check.case_row(child.contender, cases[0], skipped=True, reason="declined", passed=None)
    forward = [check.check_case(child, c) for c in cases] + [skipped]
    backward = [check.check_backward_case(child, c) for c in cases]
    return forward + [{**skipped, "direction": contract.BACKWARD}] + backward


def run_paths(correctness: Path) -> dict:
    return {"symbolic": REF / contract.SYMBOLIC_BYTES, "cpu_bytes": REF / contract.CPU_BYTES,
            "cpu_ceilings": REF / contract.CPU_CEILINGS, "correctness": correctness,
            "timing": REF / contract.TIMING_SUMMARY, "timing_table": REF / contract.TIMING,
            "gpu_bytes": REF / contract.GPU_BYTES, "gpu_bytes_summary": REF / contract.GPU_BYTES_SUMMARY,
            "benchmarks": sorted((REF / contract.BENCHMARKS).glob("cpu_*.tsv"))}


@pytest.fixture(scope="module")
def numbers(tmp_path_factory) -> dict:
    """The reference run's numbers with the nograd contender's rows among its cases."""
    summary = json.loads((REF / contract.CORRECTNESS_SUMMARY).read_text())
    summary["cases_detail"] += nograd_rows()
    path = tmp_path_factory.mktemp("run") / "correctness.json"
    path.write_text(json.dumps(summary))
    return results_readme.collect(run_paths(path))


def test_the_rows_are_a_passing_forward_and_failed_gradients():
    rows = contract.with_direction(pd.DataFrame(nograd_rows()))
    ran = rows[~rows["skipped"].astype(bool)]
    assert ran.groupby("direction")["passed"].agg(list).to_dict() == {
        contract.FORWARD: [True] * 4, contract.BACKWARD: [False] * 4}
    assert ran[ran["direction"] == contract.BACKWARD]["reason"].str.startswith(
        "TypeError: its output does not require grad").all()


def test_the_readme_says_a_contender_that_fails_its_gradients_failed(numbers):
    text = results_readme.render(PAGES / "README.md.j2", numbers)
    [row] = [line for line in text.splitlines() if line.startswith("| nograd |")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    # verdict, forward passed / failed / skipped, gradients passed / failed / skipped, first failure
    assert cells[1:8] == ["**FAILED** 4 cases", "4", "0", "1", "0", "4", "1"], row
    assert cells[8].startswith("gradients: TypeError: its output does not require grad"), row
    # the reference's fa4 fails 4 of its 48 gradient cases: failed too, not "pass"
    [fa4] = [line for line in text.splitlines() if line.startswith("| fa4 |")]
    assert "**FAILED**" in fa4


def test_the_reports_first_page_says_a_contender_that_fails_its_gradients_failed(numbers):
    rst = results_readme.render(PAGES / "headline.rst.j2", numbers)
    [line] = [line for line in rst.splitlines() if "``nograd``" in line]
    assert "gradients **0 of 4** pass (1 skipped)" in line and line.rstrip(".").endswith(
        "**FAILED 4 cases**"), line
    assert "**4 of 4** pass forward (1 skipped)" in line
    # as the report shows it: reStructuredText without a warning (the reason's markup escaped)
    targets = "".join(f"\n.. _{name}.png: #{name}\n" for name in contract.FIGURES)
    html = publish_parts(rst + targets, writer="html", settings_overrides={"halt_level": 2})["html_body"]
    said = html[html.index("<tt class=\"docutils literal\">nograd</tt>"):].split("</li>")[0].split("\n")[0]
    assert "<strong>FAILED 4 cases</strong>" in said
    assert "its output does not require grad" in said


def test_a_contender_without_a_backward_is_not_said_to_pass_its_gradients(numbers):
    text = results_readme.render(PAGES / "README.md.j2", numbers)
    [lab02] = [line for line in text.splitlines() if line.startswith("| lab02 |")]
    assert "| none ran | — |" in lab02
    assert "Gradients not run: lab02 (lab02 has no backward" in text
