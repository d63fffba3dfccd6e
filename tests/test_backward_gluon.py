"""The backward's Gluon dK/dV kernel for Hopper (`minimodel.kernel.gluon_backward`): where the policy
lets it run, what it compiles to for sm_90 (on any machine), and, on an H200, every sweep case with
each path forced, against float64 under the project's rule (minimodel.gpu.kernel_check).

Gluon has no interpreter: on a machine without Hopper the Gluon configuration runs the tl table's
kernels (`launch_bwd_config`), and these tests check that it says so.
"""

import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import torch
from conftest import DEVICE, HAS_CUDA

from minimodel.floor.correctness_rule import reference_grads
from minimodel.gpu.kernel_check import check_backward_case
from minimodel.kernel import HOPPER, SHARED_MEMORY, flash_attn_backward, flash_attn_forward
from minimodel.kernel.bwd_config import (
    BwdConfig,
    get_bwd_config,
    gluon_bwd_config,
    gluon_ok,
    launch_bwd_config,
    tl_bwd_config,
)
from minimodel.kernel.gluon_backward import HEAD_DIMS

ROOT = Path(__file__).resolve().parents[1]
HOPPER_HERE = HAS_CUDA and torch.cuda.get_device_capability() == (9, 0)
requires_hopper = pytest.mark.skipif(not HOPPER_HERE, reason="the Gluon kernel runs on Hopper (sm_90) only")


@pytest.fixture
def gen(request):
    """A generator seeded from the test's name: the same inputs every run (tests/test_backward.py)."""
    return torch.Generator().manual_seed(zlib.crc32(request.node.nodeid.encode()))


def test_a_gluon_configuration_is_checked_when_made():
    with pytest.raises(ValueError, match="GLUON keeps the separate dQ pass"):
        BwdConfig(64, 128, 128, 64, 8, 2, ATOMIC_DQ=True, GLUON=True)
    with pytest.raises(ValueError, match="64 keys per warpgroup .* got BLOCK_N1 = 128, num_warps_kv = 4"):
        BwdConfig(64, 128, 128, 64, 4, 2, GLUON=True)
    with pytest.raises(ValueError, match="num_stages_kv >= 2"):
        BwdConfig(64, 128, 128, 64, 8, 1, GLUON=True)
    with pytest.raises(ValueError, match=r"built for head dims \(64, 128\), got 32"):
        gluon_bwd_config(32, False)
    cfg = gluon_bwd_config(128, True)
    assert cfg.path == "gluon" and cfg.num_warps_kv * 16 == cfg.BLOCK_N1 and not cfg.ATOMIC_DQ
    # its dQ pass is the tl table's
    assert (cfg.BLOCK_M2, cfg.BLOCK_N2) == (get_bwd_config(128, True, "cuda").BLOCK_M2,
                                            get_bwd_config(128, True, "cuda").BLOCK_N2)


# on Hopper too, for now: the Gluon kernel was not faster than tl's on the H200 (notes/backward.md)
@pytest.mark.parametrize("arch", [80, 86, 89, HOPPER])
@pytest.mark.parametrize("d", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_the_policy_runs_tl_on_every_architecture_and_under_the_interpreter(arch, d, causal):
    assert get_bwd_config(d, causal, "cuda", arch).path == "tl"
    assert get_bwd_config(d, causal, "cpu").path == "tl"


@pytest.mark.parametrize("d", [16, 32, 256])
def test_the_policy_keeps_tl_where_no_gluon_kernel_is_built(d):
    assert d not in HEAD_DIMS
    for causal in (False, True):
        assert get_bwd_config(d, causal, "cuda", HOPPER) == tl_bwd_config(d, causal, "cuda", HOPPER)


@pytest.mark.skipif(HOPPER_HERE, reason="checks a machine where the Gluon kernel cannot run")
def test_a_gluon_configuration_runs_the_tl_kernels_where_gluon_cannot_and_says_so(gen):
    q, k, v, do = (torch.randn(1, 2, 70, 64, generator=gen).half().to(DEVICE) for _ in range(4))
    assert not gluon_ok(q, k, v, do)
    ran = launch_bwd_config(q, k, v, True, gluon_bwd_config(64, True), do)
    assert ran.path == "tl" and ran == tl_bwd_config(64, True, q.device.type)
    row = check_backward_case(1, 2, 70, 64, True, device=DEVICE, generator=gen,
                              config=gluon_bwd_config(64, True))
    assert row["passed"], row


def test_the_gluon_kernel_compiles_for_sm90_without_spilling_in_one_partition_that_fits():
    # compiled in a fresh process: this session interprets its kernels
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bwd_bench.py"), "--report", "--gluon"],
                          env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    print(proc.stdout)
    found = re.findall(r"d=(\d+) causal=(\w+) (BwdConfig\(.*?\)): _bwd_dkdv_hopper: (\d+) registers, "
                       r"(\d+) spill bytes, (\d+) shared bytes, (\d+) warps", proc.stdout)
    assert len(found) == 4  # the policy's Gluon configuration at d = 64, 128, causal and not
    for d, causal, cfg, registers, spills, shared, warps in found:
        assert cfg == repr(gluon_bwd_config(int(d), causal == "True"))
        assert int(spills) == 0 and int(shared) <= SHARED_MEMORY[HOPPER]
        # one partition (no warp specialization yet): every warp holds the registers it reports
        assert int(warps) == gluon_bwd_config(int(d), causal == "True").num_warps_kv
        assert 0 < int(registers) <= 255 and int(registers) * int(warps) * 32 <= 65536


SWEEP = [(n, d, causal, dtype, h_kv) for n in (128, 1000, 4096) for d in (64, 128) for causal in (False, True)
         for dtype in ("float16", "bfloat16") for h_kv in (4, 1)]


def forced(path: str, d: int, causal: bool) -> BwdConfig:
    return gluon_bwd_config(d, causal) if path == "gluon" else tl_bwd_config(d, causal, "cuda", HOPPER)


def check(path, B, H, N, d, causal, dtype="float16", gen=None, **kw):
    """One case with `path` forced, against float64; asserts the path that ran."""
    q = torch.empty(B, H, N, d, dtype=getattr(torch, dtype), device="cuda")
    h_kv = kw.get("H_kv") or H
    kv = torch.empty(B, h_kv, N, d, dtype=q.dtype, device="cuda")
    if kw.get("layout", "contiguous") == "contiguous":
        assert launch_bwd_config(q, kv, kv, causal, forced(path, d, causal), q).path == path
    row = check_backward_case(B, H, N, d, causal, dtype, device="cuda", generator=gen,
                              config=forced(path, d, causal), **kw)
    print(" ".join(f"{g}: {row[f'err_{g}_kernel_vs_fp64']:.2e}/{row[f'tolerance_{g}']:.2e}"
                   for g in ("dq", "dk", "dv")))
    assert not row["has_nan"] and row["passed"], row


@requires_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("path", ["gluon", "tl"])
@pytest.mark.parametrize("n, d, causal, dtype, h_kv", SWEEP)
def test_each_path_on_every_sweep_case_matches_float64(gen, path, n, d, causal, dtype, h_kv):
    check(path, 2, 4, n, d, causal, dtype, gen=gen, H_kv=h_kv)


@requires_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True])
def test_the_gluon_kernel_keeps_every_guarantee_on_the_gpu(gen, d, causal):
    check("gluon", 1, 2, 1, d, causal, gen=gen)  # one query: every tile ragged
    check("gluon", 1, 4, 77, d, causal, "bfloat16", gen=gen, H_kv=2)
    check("gluon", 2, 2, 300, d, causal, gen=gen, layout="bnhd")
    check("gluon", 1, 2, 333, d, causal, gen=gen, sm_scale=0.3)
    check("gluon", 2, 33_000, 24, d, causal, gen=gen)  # B·H past 65,535
    check("gluon", 2, 33_000, 24, d, causal, gen=gen, H_kv=3_000)


@requires_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_the_gluon_kernel_addresses_rows_past_2_31_elements(gen, causal):
    row_stride, N, d = 2**25 + 64, 130, 64
    base = torch.empty(row_stride * (N - 1) + 4 * d, dtype=torch.float16, device="cuda")
    q, k, v, do = (base.as_strided((1, 1, N, d), (0, 0, row_stride, 1), j * d) for j in range(4))
    for t in (q, k, v, do):
        t.copy_(torch.randn(1, 1, N, d, generator=gen).half())
    cfg = gluon_bwd_config(d, causal)
    assert launch_bwd_config(q, k, v, causal, cfg, do).path == "gluon"
    o, lse = flash_attn_forward(q, k, v, causal=causal, return_lse=True)
    got = flash_attn_backward(q, k, v, o, lse, do, causal, config=cfg)
    exact, lowp = reference_grads(q, k, v, do, causal, upcast=True), reference_grads(q, k, v, do, causal)
    for g, e, t in zip(got, exact, lowp, strict=True):
        assert (g.double() - e).abs().max() <= max(1e-3, 2 * (t.double() - e).abs().max())


@requires_hopper
@pytest.mark.gpu
def test_the_gluon_path_is_deterministic_and_a_broadcast_do_runs_tl(gen):
    q, k, v, do = (torch.randn(2, 4, 1000, 128, generator=gen).half().cuda() for _ in range(4))
    o, lse = flash_attn_forward(q, k, v, causal=True, return_lse=True)
    first, second = (flash_attn_backward(q, k, v, o, lse, do, True, config=gluon_bwd_config(128, True))
                     for _ in range(2))
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    ones = torch.ones(1, 1, 1, 1, dtype=q.dtype, device="cuda").expand(q.shape)  # autograd's dO of a sum
    assert launch_bwd_config(q, k, v, True, gluon_bwd_config(128, True), ones).path == "tl"
