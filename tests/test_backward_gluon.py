"""The backward's Gluon kernels for Hopper (`BwdConfig.dkdv` "gluon_ws", `gluon_bwd_ws`, with dQ by
the tl pass, the Gluon pass (`gluon_bwd_dqpass`) or in the kernel): where the policy lets them run,
what they compile to for sm_90 (on any machine), and, on an H200, every sweep case with each path
forced, against float64 under the project's rule (minimodel.gpu.kernel_check).

Gluon has no interpreter: on a machine without Hopper the Gluon configuration runs the tl table's
kernels (`launch_bwd_config`), and these tests check that it says so.
"""

import contextlib
import json
import os
import subprocess
import sys
import zlib
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import DEVICE, HAS_CUDA

from minimodel.floor.correctness_rule import reference_grads, tolerance
from minimodel.gpu.kernel_check import check_backward_case
from minimodel.kernel import (
    HOPPER,
    SHARED_MEMORY,
    BwdConfig,
    attention,
    flash_attn_backward,
    flash_attn_forward,
    get_bwd_config,
    gluon_ws_config,
    launch,
    launch_bwd_config,
    policy,
    tl_bwd_config,
)
from minimodel.kernel.config import GLUON_DQ_TILES, WS_WARPS
from minimodel.kernel.gluon_bwd_state import async_reduce_shared_to_global
from minimodel.kernel.gluon_bwd_ws import MMA_REGS
from minimodel.kernel.policy import GLUON_BWD_HEAD_DIMS as HEAD_DIMS

ROOT = Path(__file__).resolve().parents[1]
HOPPER_HERE = HAS_CUDA and torch.cuda.get_device_capability() == (9, 0)
requires_hopper = pytest.mark.skipif(not HOPPER_HERE, reason="the Gluon kernel runs on Hopper (sm_90) only")


@pytest.fixture
def gen(request):
    """A generator seeded from the test's name: the same inputs every run (tests/test_backward.py)."""
    return torch.Generator().manual_seed(zlib.crc32(request.node.nodeid.encode()))


def test_a_gluon_configuration_is_checked_when_made():
    with pytest.raises(ValueError, match="gluon_ws: BLOCK_N1 128 and num_warps_kv 12, got 128 and 8"):
        BwdConfig(64, 128, 128, 64, 8, 2, dkdv="gluon_ws")
    with pytest.raises(ValueError, match="num_stages_kv >= 2"):
        BwdConfig(64, 128, 128, 64, WS_WARPS, 1, dkdv="gluon_ws")
    with pytest.raises(ValueError, match=r"built for head dims \(64, 128\), got 32"):
        gluon_ws_config(32, False)
    with pytest.raises(ValueError, match="in_kernel dQ: BLOCK_M1 is 64 or 128"):
        BwdConfig(32, 128, 128, 64, WS_WARPS, 2, dkdv="gluon_ws", dq="in_kernel")
    for d in HEAD_DIMS:
        for causal in (False, True):
            ws, tma = gluon_ws_config(d, causal), gluon_ws_config(d, causal, "in_kernel")
            assert (ws.dkdv, ws.dq, tma.dkdv, tma.dq) == ("gluon_ws", "tl_pass", "gluon_ws", "in_kernel")
            assert ws.language == tma.language == "gluon" and ws.BLOCK_N1 == tma.BLOCK_N1 == 128
            assert (ws.deterministic, tma.deterministic) == (True, False)
            # dQ in the kernel takes ws's tiles (at d = 64 its 128 rows, Pᵀ and dSᵀ through shared memory)
            assert tma.BLOCK_M1 == ws.BLOCK_M1 and tma.num_stages_kv == ws.num_stages_kv
            tl = get_bwd_config(d, causal, "cuda")
            assert (ws.BLOCK_M2, ws.BLOCK_N2) == (tl.BLOCK_M2, tl.BLOCK_N2)  # the tl dQ pass's tiles


# the tl table's (its N unknown), on a GPU that is not Hopper, and under the interpreter
@pytest.mark.parametrize("arch", [80, 86, 89, HOPPER])
@pytest.mark.parametrize("d", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_the_policy_runs_tl_off_hopper_and_under_the_interpreter(arch, d, causal):
    assert get_bwd_config(d, causal, "cuda", arch).dkdv == "tl"
    assert get_bwd_config(d, causal, "cpu", n=4096).dkdv == "tl"
    if arch != HOPPER:
        assert get_bwd_config(d, causal, "cuda", arch, n=4096).dkdv == "tl"


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True])
def test_the_policy_picks_the_warp_specialized_kernel_on_hopper_from_ws_min_n(d, causal, monkeypatch):
    """Timed faster than the tl kernels on the H200 at N = 4096 (notes/backward.md); deterministic:
    the tl dQ pass, no atomics."""
    monkeypatch.setattr(policy, "INTERPRETED", False)
    min_n = policy.GLUON_DQ_PASS[(d, causal)].min_n  # the Gluon dQ pass from here on: timed faster
    for n in sorted({policy.WS_MIN_N, max(min_n - 1, policy.WS_MIN_N), min_n, 16384}):
        cfg = get_bwd_config(d, causal, "cuda", HOPPER, n=n)
        dq = "gluon_pass" if n >= min_n else "tl_pass"
        assert cfg == gluon_ws_config(d, causal, dq) and cfg.deterministic and cfg.dkdv == "gluon_ws"
    assert get_bwd_config(d, causal, "cuda", HOPPER, n=policy.WS_MIN_N - 1).dkdv == "tl"


def test_the_dq_pass_policy_is_the_one_timed():
    """notes/backward.md: two consumers and 4 stages from WS_MIN_N on, except d = 64 not causal: three
    consumers from N = 4096 (0.87x the tl pass at N = 1024, 1.01x at 2048, 1.03-1.09x above)."""
    two = policy.DqPass(4, 2, policy.WS_MIN_N)
    assert policy.GLUON_DQ_PASS == {(64, False): policy.DqPass(4, 3, 4096), (64, True): two,
                                    (128, False): two, (128, True): two}
    assert GLUON_DQ_TILES == {2: (128, 64, 12), 3: (192, 64, 16)}


@pytest.mark.parametrize(("B", "H", "N", "causal", "consumers"), [
    (2, 4, 1024, False, 2),  # 64 programs of two: one wave; the Gluon pass 1.30x the tl pass's speed
    (2, 4, 4096, False, None),  # three's 176 programs, 1.3 waves: 0.73x; two's 256: 0.99x
    (4, 32, 4096, False, 3),  # three's 2,816 programs, 21 waves: 1.04x
    (2, 32, 8192, False, 3), (1, 32, 16384, False, 3),  # FlashAttention's grid, 1.03-1.09x
    (8, 32, 2048, False, None), (16, 32, 1024, False, None),  # two 0.88-1.02x, three 0.87-1.01x
    (2, 4, 1024, True, 2), (2, 4, 4096, True, 2), (4, 32, 4096, True, 2)])  # causal: two, 1.33-1.49x
def test_the_dq_pass_counts_its_programs_at_d_64_as_timed_on_the_h200(B, H, N, causal, consumers,
                                                                       monkeypatch):
    """notes/backward.md, "The lab grid's regression measured": the dQ pass alone on the H200's 132
    SMs at the lab grid's and FlashAttention's points; the whole policy's choice, through
    `default_bwd_config` as a call makes it."""
    assert policy.dq_consumers(64, causal, N, B * H, 132) == consumers
    monkeypatch.setattr(policy, "INTERPRETED", False)
    cfg = get_bwd_config(64, causal, "cuda", HOPPER, n=N, heads=B * H, sms=132)
    assert (cfg.dq == "gluon_pass") == (consumers is not None)
    assert cfg.dkdv == "gluon_ws" and cfg.deterministic
    if consumers:
        assert cfg.dq_consumers == consumers and cfg == gluon_ws_config(64, causal, "gluon_pass", consumers)
    monkeypatch.setattr(launch, "device_arch", lambda device: HOPPER)
    monkeypatch.setattr(launch, "device_sms", lambda device: 132)
    q = SimpleNamespace(device=torch.device("cuda"), shape=(B, H, N, 64))  # all the default reads of q
    assert launch.default_bwd_config(q, causal) == cfg


def test_the_policys_three_consumers_launch_what_the_h200_probe_checked():
    """`config_launch` of the policy's d = 64 not causal configuration is the launch that
    tools/dq_pass_probe.py checked against float64 on the H200 (`dq_launch`, 3 consumers of 64 rows,
    64 keys, 4 stages): the same kernel, grid, options and arguments (tensors by identity)."""
    from minimodel.kernel import gluon_bwd_dqpass

    q = torch.empty(2, 4, 1000, 64, dtype=torch.float16)
    rows = torch.empty(2, 4, 1000)
    cfg = gluon_ws_config(64, False, "gluon_pass")
    got = gluon_bwd_dqpass.config_launch(q, q, q, q, q, rows, rows, 0.125, cfg, False)
    want = gluon_bwd_dqpass.dq_launch(q, q, q, q, q, rows, rows, 0.125, False, block_n=64, stages=4,
                                      consumers=3)

    def plain(args):
        return {k: (id(v.base), v.shape, v.strides, v.block_shape) if hasattr(v, "block_shape")
                else id(v) if isinstance(v, torch.Tensor) else v for k, v in args.items()}
    assert got[0] is want[0] and got[1] == want[1] == (8 * 6, 1, 1) and got[3] == want[3]
    assert plain(got[2]) == plain(want[2]) and got[2]["CONSUMERS"] == 3 and got[2]["BLOCK_M"] == 64


@pytest.mark.parametrize(("d", "causal", "tiles"), [(64, False, (192, 64, 16)), (64, True, (128, 64, 12)),
                                                    (128, False, (128, 64, 12))])
def test_the_gluon_dq_pass_is_deterministic_beside_a_gluon_dkdv_kernel_with_its_own_tiles(d, causal, tiles):
    cfg = gluon_ws_config(d, causal, "gluon_pass")
    assert (cfg.dkdv, cfg.dq) == ("gluon_ws", "gluon_pass") and cfg.deterministic and cfg.num_stages_q == 4
    assert (cfg.BLOCK_M2, cfg.BLOCK_N2, cfg.num_warps_q) == tiles
    # the preprocess, a tl kernel, takes a power of two: 128 rows beside three consumers' 192
    assert cfg.preprocess_rows == 128
    if tiles[0] == 192:  # three consumers' rows are the Gluon pass's alone
        with pytest.raises(ValueError, match="tile sizes must be powers of two"):
            replace(cfg, dq="tl_pass")
    with pytest.raises(ValueError, match="dq 'gluon_pass' runs beside the gluon_ws dK/dV kernel"):
        replace(cfg, dkdv="tl", num_warps_kv=8)
    with pytest.raises(ValueError, match=r"gluon_pass: \(BLOCK_M2, BLOCK_N2, num_warps_q\)"):
        replace(cfg, BLOCK_N2=32)
    with pytest.raises(ValueError, match="num_stages_q 2 to 4"):
        replace(cfg, num_stages_q=5)
    # where Gluon cannot run (here: no Hopper), the call runs the tl table's kernels, both passes
    q = torch.zeros(1, 1, 8, 64, device=DEVICE)
    assert launch_bwd_config(q, q, q, False, cfg, q).dq == "tl_pass"


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True])
def test_deterministic_false_lets_the_policy_add_dq_by_tma_reductions_on_hopper(d, causal, monkeypatch):
    """The caller's choice (`attention(..., deterministic=False)`): dQ in the kernel where the
    warp-specialized kernel runs; the tl kernels elsewhere, which are deterministic anyway; and
    never while PyTorch's deterministic mode is on."""
    monkeypatch.setattr(policy, "INTERPRETED", False)
    n = policy.WS_MIN_N
    cfg = get_bwd_config(d, causal, "cuda", HOPPER, n=n, deterministic=False)
    assert cfg == gluon_ws_config(d, causal, "in_kernel") and not cfg.deterministic
    assert get_bwd_config(d, causal, "cuda", HOPPER, n=n - 1, deterministic=False).deterministic
    assert get_bwd_config(d, causal, "cuda", 80, n=n, deterministic=False).deterministic
    monkeypatch.setattr(launch, "device_arch", lambda device: HOPPER)
    monkeypatch.setattr(launch, "device_sms", lambda device: 132)
    q = SimpleNamespace(device=torch.device("cuda"), shape=(1, 1, n, d))  # all the default reads of q
    assert not launch.default_bwd_config(q, causal, deterministic=False).deterministic
    with torch_deterministic():
        assert launch.default_bwd_config(q, causal, deterministic=False).deterministic


@contextlib.contextmanager
def torch_deterministic():
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


@pytest.mark.parametrize("d", [16, 32, 256])
def test_the_policy_keeps_tl_where_no_gluon_kernel_is_built(d):
    assert d not in HEAD_DIMS
    for causal in (False, True):
        assert get_bwd_config(d, causal, "cuda", HOPPER) == tl_bwd_config(d, causal, "cuda", HOPPER)


@pytest.mark.skipif(HOPPER_HERE, reason="checks a machine where the Gluon kernel cannot run")
def test_a_gluon_configuration_runs_the_tl_kernels_where_gluon_cannot_and_says_so(gen):
    q, k, v, do = (torch.randn(1, 2, 70, 64, generator=gen).half().to(DEVICE) for _ in range(4))
    assert not launch.gluon_ok(q, k, v, do)
    for dq in ("tl_pass", "gluon_pass", "in_kernel"):
        ran = launch_bwd_config(q, k, v, True, gluon_ws_config(64, True, dq), do)
        assert ran.dkdv == "tl" and ran == tl_bwd_config(64, True, q.device.type)  # deterministic
    row = check_backward_case(1, 2, 70, 64, True, device=DEVICE, generator=gen,
                              config=gluon_ws_config(64, True, "in_kernel"))
    assert row["passed"] and row["dkdv"] == "tl" and row["dq"] == "tl_pass", row


# one compile per case (d, causal, dQ[, BLOCK_M1]): both head dims, causal and not, every dQ (in the
# kernel at its largest shared memory; at d = 64 its 128 query rows, where Pᵀ and dSᵀ reach their
# GEMMs through shared memory, `Config.SMEM_OPERANDS`, and 64 rows; the Gluon pass's launch, with
# the policy's consumers and with three)
WS_CASES = ("64,0,tl_pass", "64,1,in_kernel", "128,0,in_kernel", "128,1,tl_pass", "128,1,in_kernel",
            "64,0,in_kernel,64", "64,1,gluon_pass", "128,0,gluon_pass", "128,1,gluon_pass", "64,0,gluon_pass",
            "64,1,gluon_pass:3")


@pytest.mark.compiles
def test_the_warp_specialized_kernel_compiles_for_sm90_without_spilling_and_splits_its_registers(tmp_path):
    # compiled in a fresh process: this session interprets its kernels
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cases = [a for c in WS_CASES for a in ("--case", c)]
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bwd_ws_report.py"), *cases, "--json",
                           str(tmp_path / "report.json")], env=env, capture_output=True, text=True)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads((tmp_path / "report.json").read_text())
    assert len(rows) == len(WS_CASES)
    for case, row in zip(WS_CASES, rows, strict=True):
        d, causal, dq, *block_m = case.split(",")
        d, causal, (kind, _, consumers) = int(d), bool(int(causal)), dq.partition(":")
        cfg = gluon_ws_config(d, causal, kind, int(consumers) if consumers else None)
        assert (row["d"], row["causal"], row["dq"]) == (d, causal, kind)
        if kind == "gluon_pass":  # the Gluon dQ pass: Q and dO of each consumer, K and V by TMA, no
            # reductions; with three consumers (and the policy's at d = 64 not causal) at 160
            # registers (the producer's warpgroup keeps 32), as the forward's three would
            regs = {24, 240} if cfg.dq_consumers == 2 else {32, 160}
            assert row["kernel"] == "_bwd_dq_hopper" and row["stages"] == cfg.num_stages_q
            assert row["consumers"] == cfg.dq_consumers and row["warps"] == 4 * (cfg.dq_consumers + 1)
            assert row["spill_stack_bytes"] == 0 and row["stl"] == row["ldl"] == 0
            assert row["shared_bytes"] <= SHARED_MEMORY[HOPPER] and regs <= set(row["setmaxnreg"])
            assert row["utmaldg"] == 2 * cfg.dq_consumers + 2 and row["hgmma"] > 0
            assert row["redg"] == row["utmaredg"] == 0
            continue
        rows = int(block_m[0]) if block_m else cfg.BLOCK_M1
        assert (row["BLOCK_M1"], row["stages"]) == (rows, cfg.num_stages_kv)
        assert row["spill_stack_bytes"] == 0 and row["stl"] == row["ldl"] == 0
        assert row["shared_bytes"] <= SHARED_MEMORY[HOPPER] and row["warps"] == WS_WARPS
        # the split: the producer's warpgroup down to 24 registers, the two MMA warpgroups up to 240
        assert {24, MMA_REGS.value} <= set(row["setmaxnreg"])
        assert 2 * 128 * MMA_REGS.value + 128 * 24 <= 65536
        # TMA loads of K, V, Q, dO only (LSE and D by the producer's loads: `_rows`), warpgroup MMAs,
        # mbarriers; with dQ in the kernel one TMA reduction per MMA warpgroup, no other reduction
        assert row["utmaldg"] == 4 and row["hgmma"] > 0 and row["syncs"] > 0
        assert row["utmaredg"] == 2 * (kind == "in_kernel") and row["redg"] == 0


SWEEP = [(n, d, causal, dtype, h_kv) for n in (128, 1000, 4096) for d in (64, 128) for causal in (False, True)
         for dtype in ("float16", "bfloat16") for h_kv in (4, 1)]


# the kernels a path runs -> its configuration
FORCED = {"gluon_ws": gluon_ws_config,
          "gluon_ws in_kernel": lambda d, causal: gluon_ws_config(d, causal, "in_kernel"),
          "gluon_ws gluon_pass": lambda d, causal: gluon_ws_config(d, causal, "gluon_pass"),
          "tl": lambda d, causal: tl_bwd_config(d, causal, "cuda", HOPPER)}


def runs(cfg: BwdConfig) -> str:
    """The path `cfg` names (FORCED's key)."""
    return cfg.dkdv + ("" if cfg.dq == "tl_pass" else f" {cfg.dq}")


def forced(path: str, d: int, causal: bool) -> BwdConfig:
    return FORCED[path](d, causal)


def check(path, B, H, N, d, causal, dtype="float16", gen=None, **kw):
    """One case with the dK/dV kernel `path` forced, against float64; asserts the kernel that ran."""
    q = torch.empty(B, H, N, d, dtype=getattr(torch, dtype), device="cuda")
    h_kv = kw.get("H_kv") or H
    kv = torch.empty(B, h_kv, N, d, dtype=q.dtype, device="cuda")
    if kw.get("layout", "contiguous") == "contiguous":
        assert runs(launch_bwd_config(q, kv, kv, causal, forced(path, d, causal), q)) == path
    row = check_backward_case(B, H, N, d, causal, dtype, device="cuda", generator=gen,
                              config=forced(path, d, causal), **kw)
    print(" ".join(f"{g}: {row[f'err_{g}_kernel_vs_fp64']:.2e}/{row[f'tolerance_{g}']:.2e}"
                   for g in ("dq", "dk", "dv")))
    assert not row["has_nan"] and row["passed"], row


@requires_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("path", list(FORCED))
@pytest.mark.parametrize("n, d, causal, dtype, h_kv", SWEEP)
def test_each_path_on_every_sweep_case_matches_float64(gen, path, n, d, causal, dtype, h_kv):
    check(path, 2, 4, n, d, causal, dtype, gen=gen, H_kv=h_kv)


@requires_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("path", ["gluon_ws", "gluon_ws in_kernel", "gluon_ws gluon_pass"])
@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True])
def test_the_gluon_kernel_keeps_every_guarantee_on_the_gpu(gen, path, d, causal):
    check(path, 1, 2, 1, d, causal, gen=gen)  # one query: every tile ragged
    check(path, 1, 4, 77, d, causal, "bfloat16", gen=gen, H_kv=2)
    check(path, 2, 2, 300, d, causal, gen=gen, layout="bnhd")
    check(path, 1, 2, 333, d, causal, gen=gen, sm_scale=0.3)
    check(path, 2, 33_000, 24, d, causal, gen=gen)  # B·H past 65,535
    check(path, 2, 33_000, 24, d, causal, gen=gen, H_kv=3_000)


@requires_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("path", ["gluon_ws", "gluon_ws in_kernel", "gluon_ws gluon_pass"])
@pytest.mark.parametrize("causal", [False, True])
def test_the_gluon_kernel_addresses_rows_past_2_31_elements(fixed_gen, path, causal):
    row_stride, N, d = 2**25 + 64, 130, 64
    base = torch.empty(row_stride * (N - 1) + 4 * d, dtype=torch.float16, device="cuda")
    q, k, v, do = (base.as_strided((1, 1, N, d), (0, 0, row_stride, 1), j * d) for j in range(4))
    for t in (q, k, v, do):
        t.copy_(torch.randn(1, 1, N, d, generator=fixed_gen).half())
    cfg = forced(path, d, causal)
    assert runs(launch_bwd_config(q, k, v, causal, cfg, do)) == path
    o, lse = flash_attn_forward(q, k, v, causal=causal, return_lse=True)
    got = flash_attn_backward(q, k, v, o, lse, do, causal, config=cfg)
    exact, lowp = reference_grads(q, k, v, do, causal, upcast=True), reference_grads(q, k, v, do, causal)
    for g, e, t in zip(got, exact, lowp, strict=True):
        assert (g.double() - e).abs().max() <= max(1e-3, 2 * (t.double() - e).abs().max())


@requires_hopper
@pytest.mark.gpu
def test_the_gluon_path_is_deterministic_and_a_broadcast_do_runs_tl(gen):
    q, k, v, do = (torch.randn(2, 4, 1000, 128, generator=gen).half().cuda() for _ in range(4))
    # dQ by a pass is (dQ added in the kernel by TMA reductions is not)
    for cfg, causal in ((gluon_ws_config(128, True), True), (gluon_ws_config(128, True, "gluon_pass"), True),
                        (gluon_ws_config(128, False, "gluon_pass"), False)):
        o, lse = flash_attn_forward(q, k, v, causal=causal, return_lse=True)
        assert launch_bwd_config(q, k, v, causal, cfg, do) == cfg
        first, second = (flash_attn_backward(q, k, v, o, lse, do, causal, config=cfg) for _ in range(2))
        assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True)), cfg
    ones = torch.ones(1, 1, 1, 1, dtype=q.dtype, device="cuda").expand(q.shape)  # autograd's dO of a sum
    assert launch_bwd_config(q, k, v, True, gluon_ws_config(128, True), ones).dkdv == "tl"


@requires_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("d", HEAD_DIMS)
def test_attention_not_deterministic_adds_dq_by_tma_reductions_and_matches_float64(fixed_gen, d):
    q, k, v, do = (torch.randn(2, 4, 1024, d, generator=fixed_gen).half().cuda() for _ in range(4))
    assert launch.default_bwd_config(q, True, deterministic=False).dq == "in_kernel"
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    got = torch.autograd.grad(attention(*leaves, causal=True, deterministic=False), leaves, do)
    exact = reference_grads(q, k, v, do, causal=True, upcast=True)
    lowp = reference_grads(q, k, v, do, causal=True)
    for g, e, t in zip(got, exact, lowp, strict=True):
        err, err_torch = ((x.double() - e).abs().max().item() for x in (g, t))
        assert err <= tolerance(err_torch), (err, err_torch)


@pytest.mark.compiles
def test_the_gluon_tma_reduction_compiles_to_the_bulk_tensor_reduce(tmp_path):
    """kernel/gluon_bwd_state's TMA reduction, compiled for sm_90 in a fresh process (this one interprets):
    one `cp.reduce.async.bulk.tensor ... .add` in the PTX, one UTMAREDG in the SASS."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "tma_reduce_probe.py"), "--report",
                           "--out", str(tmp_path)], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [row] = json.loads((tmp_path / "tma_reduce.json").read_text())
    assert row["ptx"] == ["cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.bulk_group"]
    assert row["sass_utmaredg"] == 1


def test_the_gluon_tma_reduction_refuses_a_kind_it_does_not_have():
    with pytest.raises(ValueError, match="TMA reduction kind 'mul'; accepted: add, min, max"):
        async_reduce_shared_to_global.__wrapped__(None, [0, 0], None, kind="mul", _semantic=object())
