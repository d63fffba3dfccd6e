"""The kernel compiled for Hopper on a machine without a GPU: what it reports, and that it is read right.

The compiles run in a subprocess: Triton decides once per process whether kernels are compiled
or interpreted, and this test session, without a GPU, interprets them. One subprocess runs every
report the tests below read (`RUNS`), each with its own table and exit status: torch and Triton
are imported once (about 4 s), not once per report, and a kernel two reports share is compiled
once (Triton's cache). It runs in the background from the session's start (conftest's
`background`): its minute of compiling goes on beside the other tests.
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import kernel_report
import pandas as pd
import pytest
from conftest import background

from minimodel.kernel import SHARED_MEMORY, SUPPORTED_HEAD_DIMS

ROOT = Path(__file__).resolve().parents[1]
CAPPED = ("--d", "64", "--n", "4096", "--config", "128", "128", "8", "2", "--tma", "--no-sass")
# name -> the arguments of `python tools/kernel_report.py` whose table the tests read; --no-sass
# where they read no instruction counts (the disassembly is about 40 % of a kernel's report)
RUNS = {
    "shipped": ("--d", "64", "--n", "1024"),
    "uncapped": CAPPED,
    "capped": (*CAPPED, "--maxnreg", "128"),
    "over_shared": ("--d", "128", "--n", "4096", "--config", "128", "128", "8", "4", "--tma", "--no-sass"),
    **{f"policy_{arch}": ("--policy", "--arch", str(arch), *(("--no-sass",) if arch != 90 else ()))
       for arch in (80, 89, 90)},
    "gluon_128": ("--d", "128", "--n", "4096", "--config", "128", "128", "4", "3", "--gluon"),
    "shipped_bf16": ("--d", "128", "--n", "4096", "--dtype", "bfloat16", "--no-sass"),
}

# kernel_report.main on each run in turn, as the command line would run it: its printout in
# <name>.log, its table in <name>.csv, then its exit status (or the exception) in <name>.status
DRIVER = """
import contextlib, json, sys, traceback
from pathlib import Path

sys.path.insert(0, sys.argv[1])
import kernel_report

out = Path(sys.argv[3])
for name, args in json.loads(sys.argv[2]).items():
    with open(out / f"{name}.log", "w") as log, contextlib.redirect_stdout(log):
        try:
            status = kernel_report.main([*args, "--csv", str(out / f"{name}.csv")])
        except BaseException:  # an exception, or argparse's SystemExit
            status = traceback.format_exc()
    (out / f"{name}.status").write_text(str(status))
"""


def make_reports(folder: Path) -> dict:
    """Every report of `RUNS` in `folder`, made by one kernel_report process."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(ROOT / "tools"), json.dumps(RUNS), str(folder)],
                          env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {}


kernel_reports = background("kernel_reports", make_reports)


def run_report(kernel_reports: tuple[Path, dict], name: str) -> pd.DataFrame:
    """The table of the report `name`, which exited 0."""
    reports = kernel_reports[0]
    status = (reports / f"{name}.status").read_text()
    said = (reports / f"{name}.log").read_text()
    assert status == "0", f"kernel_report.py {' '.join(RUNS[name])}: exit {status}\n{said[-3000:]}"
    return pd.read_csv(reports / f"{name}.csv")


def test_signature_specializes_as_a_launch_does():
    params = [SimpleNamespace(name=n, is_constexpr=c) for n, c in
              (("Q", False), ("scale", False), ("stride", False), ("one", False), ("odd", False),
               ("BLOCK", True), ("desc", False))]
    kernel = SimpleNamespace(params=params)
    sig, const, attrs = kernel_report._signature(kernel, {
        "Q": "*fp16", "scale": 0.5, "stride": 4096, "one": 1, "odd": 77, "BLOCK": 64,
        "desc": "tensordesc<fp16[1,1,64,64]>"})
    assert sig == {"Q": "*fp16", "scale": "fp32", "stride": "i32", "one": "constexpr", "odd": "i32",
                   "BLOCK": "constexpr", "desc": "tensordesc<fp16[1,1,64,64]>"}
    assert const == {"one": 1, "BLOCK": 64}
    assert set(attrs) == {(0,), (2,)}  # the pointer and the multiple of 16


@pytest.mark.compiles
def test_shipped_configs_compile_for_hopper_and_fit(kernel_reports):
    frame = run_report(kernel_reports, "shipped")
    assert len(frame) == 2 and "error" not in frame
    assert frame["fits_shared"].all() and (frame["spill_stack_bytes"] == 0).all()
    assert frame["registers"].between(1, 255).all()
    # Hopper's warpgroup matmuls and the exp2 of the softmax are in the code
    assert (frame["hgmma"] > 0).all() and (frame["mufu"] > 0).all()
    assert (frame["instructions"] > frame[["mufu", "ffma", "fmul", "fadd", "hgmma"]].sum(axis=1)).all()


@pytest.mark.compiles
def test_a_register_cap_is_compiled_in(kernel_reports):
    # 128 x 128, 8 warps at d = 64 takes 155 registers uncapped; two programs per multiprocessor
    # need at most 128 (65,536 registers for 512 threads)
    free = run_report(kernel_reports, "uncapped")
    capped = run_report(kernel_reports, "capped")
    assert (free["registers"] > 128).all()
    assert (capped["registers"] <= 128).all() and (capped["spill_stack_bytes"] == 0).all()


@pytest.mark.compiles
def test_a_config_over_the_shared_memory_limit_is_reported(kernel_reports):
    frame = run_report(kernel_reports, "over_shared")
    assert not frame["fits_shared"].any()
    assert (frame["shared_bytes"] > SHARED_MEMORY[90]).all()


@pytest.mark.compiles
@pytest.mark.parametrize("arch", [80, 89, 90])
def test_every_config_the_policy_can_pick_compiles_without_spills_and_fits(kernel_reports, arch):
    # A100 (sm_80), L40S and Ada (sm_89), H100/H200 (sm_90): each TMA config with its fallback
    frame = run_report(kernel_reports, f"policy_{arch}")
    assert len(frame) >= 10 and set(frame["d"]) == set(SUPPORTED_HEAD_DIMS)
    assert "error" not in frame or frame["error"].isna().all()
    assert (frame["spill_stack_bytes"] == 0).all() and frame["fits_shared"].all()
    assert (frame["path"] != "tl").any() == (arch == 90)  # TMA only where the capability has it
    assert (frame["path"] == "gluon").any() == (arch == 90)  # and the Gluon kernel
    assert frame["instructions"].isna().all() == (arch != 90)  # SASS counted where it is read
    gluon = frame[frame["path"] == "gluon"]
    assert (gluon["hgmma"] > 0).all() and (gluon["mufu"] > 0).all()


@pytest.mark.compiles
def test_the_gluon_kernel_compiles_for_hopper_at_the_head_dim_it_is_built_for(kernel_reports):
    # three K/V stages at d = 128 take 229,728 of the 232,448 bytes a program may use
    frame = run_report(kernel_reports, "gluon_128")
    assert "error" not in frame or frame["error"].isna().all()
    assert (frame["spill_stack_bytes"] == 0).all() and frame["fits_shared"].all()
    assert (frame["path"] == "gluon").all() and (frame["hgmma"] > 0).all()


@pytest.mark.compiles
def test_bfloat16_inputs_are_typed_and_compiled_as_bfloat16(kernel_reports):
    import torch

    types = kernel_report._as_types({"Q": torch.empty(1, dtype=torch.bfloat16), "L": torch.empty(1),
                                     "H": torch.empty(1, dtype=torch.float16), "n": 7})
    assert types == {"Q": "*bf16", "L": "*fp32", "H": "*fp16", "n": 7}
    with pytest.raises(TypeError, match="dtype torch.float64"):
        kernel_report._as_types({"Q": torch.empty(1, dtype=torch.float64)})
    frame = run_report(kernel_reports, "shipped_bf16")
    assert (frame["dtype"] == "bfloat16").all() and (frame["path"] == "gluon").all()
    assert (frame["spill_stack_bytes"] == 0).all() and frame["fits_shared"].all()
