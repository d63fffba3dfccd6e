"""The kernel compiled for Hopper on a machine without a GPU: what it reports, and that it is read right.

The compiles run in a subprocess: Triton decides once per process whether kernels are compiled
or interpreted, and this test session, without a GPU, interprets them.
"""

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import kernel_report
import pandas as pd
import pytest

from minimodel.kernel import SHARED_MEMORY, SUPPORTED_HEAD_DIMS

ROOT = Path(__file__).resolve().parents[1]


def run_report(tmp_path, *args) -> pd.DataFrame:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = tmp_path / "report.csv"
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "kernel_report.py"), "--csv", str(out),
                           *args], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return pd.read_csv(out)


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


def test_shipped_configs_compile_for_hopper_and_fit(tmp_path):
    frame = run_report(tmp_path, "--d", "64", "--n", "1024")
    assert len(frame) == 2 and "error" not in frame
    assert frame["fits_shared"].all() and (frame["spill_stack_bytes"] == 0).all()
    assert frame["registers"].between(1, 255).all()
    # Hopper's warpgroup matmuls and the exp2 of the softmax are in the code
    assert (frame["hgmma"] > 0).all() and (frame["mufu"] > 0).all()
    assert (frame["instructions"] > frame[["mufu", "ffma", "fmul", "fadd", "hgmma"]].sum(axis=1)).all()


def test_a_register_cap_is_compiled_in(tmp_path):
    # 128 x 128, 8 warps at d = 64 takes 155 registers uncapped; two programs per multiprocessor
    # need at most 128 (65,536 registers for 512 threads)
    args = ("--d", "64", "--n", "4096", "--config", "128", "128", "8", "2", "--tma")
    free = run_report(tmp_path, *args)
    capped = run_report(tmp_path, *args, "--maxnreg", "128")
    assert (free["registers"] > 128).all()
    assert (capped["registers"] <= 128).all() and (capped["spill_stack_bytes"] == 0).all()


def test_a_config_over_the_shared_memory_limit_is_reported(tmp_path):
    frame = run_report(tmp_path, "--d", "128", "--n", "4096", "--config", "128", "128", "8", "4", "--tma")
    assert not frame["fits_shared"].any()
    assert (frame["shared_bytes"] > SHARED_MEMORY[90]).all()


@pytest.mark.parametrize("arch", [80, 89, 90])
def test_every_config_the_policy_can_pick_compiles_without_spills_and_fits(tmp_path, arch):
    # A100 (sm_80), L40S and Ada (sm_89), H100/H200 (sm_90): each TMA config with its fallback
    frame = run_report(tmp_path, "--policy", "--arch", str(arch))
    assert len(frame) >= 10 and set(frame["d"]) == set(SUPPORTED_HEAD_DIMS)
    assert "error" not in frame or frame["error"].isna().all()
    assert (frame["spill_stack_bytes"] == 0).all() and frame["fits_shared"].all()
    assert frame["TMA"].any() == (arch == 90)  # TMA only where the capability has it
    assert frame["GLUON"].any() == (arch == 90)  # and the Gluon kernel
    gluon = frame[frame["GLUON"]]
    assert (gluon["hgmma"] > 0).all() and (gluon["mufu"] > 0).all()


@pytest.mark.parametrize("d", [64, 128])
def test_the_gluon_kernel_compiles_for_hopper_at_every_head_dim_it_is_built_for(tmp_path, d):
    # three K/V stages at d = 128 take 229,728 of the 232,448 bytes a program may use
    frame = run_report(tmp_path, "--d", str(d), "--n", "4096", "--config", "128", "128", "4", "3", "--gluon")
    assert "error" not in frame or frame["error"].isna().all()
    assert (frame["spill_stack_bytes"] == 0).all() and frame["fits_shared"].all()
    assert frame["GLUON"].all() and (frame["hgmma"] > 0).all()


def test_the_gluon_kernel_with_three_consumers_compiles_for_hopper(tmp_path):
    # three warpgroups of 64 query rows at 160 registers: 64-key tiles fit, 128-key tiles spill
    # (notes/kernel.md, "Three consumer warpgroups at d = 64")
    shape = ("--d", "64", "--n", "4096", "--gluon", "--consumers", "3")
    fits = run_report(tmp_path, *shape, "--config", "192", "64", "4", "2")
    assert (fits["CONSUMERS"] == 3).all() and (fits["spill_stack_bytes"] == 0).all()
    assert fits["fits_shared"].all() and (fits["hgmma"] > 0).all()
    spills = run_report(tmp_path, *shape, "--config", "192", "128", "4", "2")
    assert (spills["spill_stack_bytes"] > 0).all()
