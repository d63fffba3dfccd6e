"""tools/bwd_bench.py, the backward's tuning tool: what it reads and how it sums up, without a GPU."""

import argparse
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import bwd_bench
import pytest
from conftest import HAS_CUDA

from minimodel.kernel import HOPPER, SHARED_MEMORY, BwdConfig, gluon_ws_config

ROOT = Path(__file__).resolve().parents[1]


def test_a_configuration_reads_as_the_bwdconfig_it_names():
    assert bwd_bench.parse_config("64,128,128,64,8,2,8,3") == BwdConfig(64, 128, 128, 64, 8, 2, 8, 3)
    assert bwd_bench.parse_config("32,64,64,32") == BwdConfig(32, 64, 64, 32)
    tma = bwd_bench.parse_config("128,128,128,64,12,2,8,3,in_kernel")
    assert tma == gluon_ws_config(64, True, "in_kernel") and not tma.deterministic
    ws = bwd_bench.parse_config("64,128,128,64,12,2,8,3,ws")
    assert ws == gluon_ws_config(128, False) and ws.deterministic


@pytest.mark.parametrize("spec", ["64,128,128", "64,32,64,32", "a,b,c,d", "64,128,128,64,8", "WS",
                                  "64,128,128,64,8,2,8,3,WS", "32,64,64,32,atomic"])
def test_a_configuration_that_is_not_one_is_refused(spec):
    with pytest.raises(argparse.ArgumentTypeError, match="expected BLOCK_M1,BLOCK_N1,BLOCK_M2,BLOCK_N2"):
        bwd_bench.parse_config(spec)


def test_backward_flops_follow_flashattention_s_convention():
    assert bwd_bench.backward_flops(2, 3, 100, 64, False) == 2.5 * 4 * 2 * 3 * 100**2 * 64
    assert bwd_bench.backward_flops(2, 3, 100, 64, True) == 2.5 * 2 * 2 * 3 * 100**2 * 64


def test_summary_is_the_geometric_mean_of_sdpa_flash_over_the_kernel():
    rows = [{"config": "a", "shipped": True, "d": 64, "causal": False, "vs_sdpa_flash": 2.0},
            {"config": "a", "shipped": True, "d": 64, "causal": False, "vs_sdpa_flash": 0.5},
            {"config": "a", "shipped": True, "d": 128, "causal": True, "vs_sdpa_flash": 4.0},
            {"config": "b", "shipped": False, "d": 64, "causal": False, "vs_sdpa_flash": math.nan}]
    found = {(name, d, causal): (points, mean) for name, d, causal, points, mean in bwd_bench.summary(rows)}
    assert found[("shipped", 64, False)] == (2, pytest.approx(1.0))
    assert found[("shipped", "all", "all")] == (3, pytest.approx(4 ** (1 / 3)))
    assert math.isnan(found[("b", 64, False)][1])  # a point that did not run is no ratio of 1


@pytest.mark.skipif(HAS_CUDA, reason="checks a machine without a GPU")
def test_timing_without_a_gpu_is_refused_after_the_command_line_is_read(capsys):
    with pytest.raises(SystemExit):
        bwd_bench.main(["--config", "64,128"])
    assert "expected BLOCK_M1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bwd_bench.main(["--d", "64"])
    assert "timing needs a CUDA device" in capsys.readouterr().err


@pytest.mark.compiles
def test_the_shipped_hopper_configs_compile_for_sm90_without_spilling_and_fit():
    # compiled in a fresh process: this session interprets its kernels
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bwd_bench.py"), "--report", "--d", "64",
                           "--d", "128"], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = re.findall(r"(_bwd_\w+): (\d+) registers, (\d+) spill bytes, (\d+) shared bytes", proc.stdout)
    print(proc.stdout)
    assert len(found) == 8  # two kernels, at d = 64 and 128, causal and not
    for _, registers, spills, shared in found:
        assert int(spills) == 0 and int(shared) <= SHARED_MEMORY[HOPPER] and 0 < int(registers) <= 255


def test_a_run_checks_times_and_sums_up_every_point_and_config(monkeypatch):
    # the CUDA run's path on the CPU, under the interpreter: tiny points, a timer that calls once
    from conftest import DEVICE

    from minimodel.gpu import grids

    def timer(graph, warmup_ms, rep_ms):
        def time_ms(make):
            make()()
            return 2.0
        return time_ms

    points = [grids.Point("fa", 1, 1, 48, 32, causal) for causal in (False, True)]
    monkeypatch.setattr(bwd_bench, "DEVICE", DEVICE)
    monkeypatch.setattr(bwd_bench, "CHECK_SHAPE", (1, 1, 40))
    # inputs fixed for the test: with a fresh seed, (1, 1, 40) causal at d = 32 once drew a dQ 1.0x
    # its tolerance (D from the fp16 O where a row sees few keys: notes/backward.md, "A rare input")
    monkeypatch.setattr(bwd_bench, "CHECK_SEED", 0)
    monkeypatch.setattr(bwd_bench, "_timer", timer)
    monkeypatch.setattr(grids, "flashattention_grid", lambda cfg: points)
    given = ["--config", "16,32,32,16", "--config", "32,64,64,32"]
    parsed = bwd_bench.build_parser().parse_args(given)
    rows = bwd_bench.run(parsed)
    assert len(rows) == 2 * 3  # per point: the shipped config and the two given
    assert all(r["passed"] and r["ms"] == 2.0 for r in rows)
    assert all(r["tflops"] == bwd_bench.backward_flops(1, 1, 48, 32, r["causal"]) / 2.0 / 1e9 for r in rows)
    # SDPA's flash backend (the CPU has one) at the same fake 2 ms: ratio 1
    assert all(r["vs_sdpa_flash"] == 1.0 for r in rows)
    assert sum(r["shipped"] for r in rows) == 2


def test_a_configuration_that_cannot_run_fails_its_check_and_the_run_goes_on(monkeypatch):
    # on the H200 a 128-row TMA-dQ tile at d = 128 asks for more shared memory than there is:
    # triton raises OutOfResources at launch, which must not end the run with every row unwritten
    from triton.runtime.errors import OutOfResources

    def too_big(*args, **kwargs):
        raise OutOfResources(330_064, 232_448, "shared memory")

    monkeypatch.setattr(bwd_bench, "check_backward_case", too_big)
    passed, text = bwd_bench.check(BwdConfig(128, 128, 128, 64), 128, False)
    assert not passed
    assert text.startswith("did not run: OutOfResources") and "shared memory" in text
