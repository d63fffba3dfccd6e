"""The backward's rows of the DRAM-bytes stage: planned at the forward's points, the model beside
them, said not measured without CUDA or ncu; the forward's rows as before."""

import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import DEVICE, requires_gpu

from minimodel.contenders.spec import Contender
from minimodel.floor import contract
from minimodel.floor.byte_model import backward as backward_model
from minimodel.gpu import hbm, hbm_plan, hbm_probe
from minimodel.gpu import ncu as ncu_tool

REF = Path(__file__).resolve().parents[1] / "results" / "reference" / "nvidia-h200"
L2 = 50 * 2**20
CFG = {"n": [1024, 4096], "head_dims": [64, 128], "many_heads_l2_multiple": 2, "ncu": None}
POINT = ["regime", "B", "H", "N", "d", "causal"]


def test_the_backward_is_planned_at_every_forward_point_after_the_forwards_rows():
    rows = pd.DataFrame(hbm_plan.plan(CFG, L2, [Contender("mine", "m:f")]))
    forward, backward = (rows[rows["direction"] == d] for d in (contract.FORWARD, contract.BACKWARD))
    assert list(rows["direction"]) == [contract.FORWARD] * len(forward) + [contract.BACKWARD] * len(backward)
    assert set(backward["impl"]) == {"naive", "flash"}  # no contender has a backward here
    ours = forward[forward["impl"].isin(["naive", "flash"])]
    points = [sorted(map(tuple, t[[*POINT, "impl"]].values)) for t in (backward, ours)]
    assert points[0] == points[1]
    dq = dict(zip(backward["impl"], backward["dq_accumulation"], strict=True))
    assert dq == {"naive": "", "flash": contract.DQ_SEPARATE_PASS}
    # the naive backward holds S and P (autograd's), dP and dS besides the eight N x d tensors
    naive = backward[(backward["impl"] == "naive")].iloc[0]
    h, n, d = naive["H"], naive["N"], naive["d"]
    assert naive["device_bytes"] == 8 * h * n * d * 2 + 2 * h * n * 4 + 4 * h * n * n * 2 + n * n


def test_the_forwards_rows_are_those_of_the_committed_reference():
    """Planned from the reference's own parameters: every forward row's point, seed and device bytes
    as the H200 run measured them, naive's model too (flash's depends on the tile the kernel ran)."""
    params = json.loads((REF / contract.manifest("gpu_bytes")).read_text())["params"]
    ref = pd.read_csv(REF / contract.GPU_BYTES, float_precision="round_trip")
    contenders = [Contender(name, "m:f") for name in params["cfg"]["contenders"]]
    planned = pd.DataFrame(hbm_plan.planned_rows(params["cfg"], params["l2_bytes"], hbm_plan.NO_CUDA,
                                                 contenders))
    planned["input_seed"] = params["random_seed"] + planned.index
    forward = contract.forward_rows(planned).reset_index(drop=True)
    ref = contract.forward_rows(ref).reset_index(drop=True)
    columns = [*POINT, "impl", "dtype", "device_bytes", "input_seed"]
    pd.testing.assert_frame_equal(forward[columns], ref[columns], check_dtype=False)
    naive = forward["impl"] == "naive"
    model = ["model_read_bytes", "model_write_bytes", "model_lab_bytes", "model_consistent_bytes",
             "compulsory_bytes"]
    pd.testing.assert_frame_equal(forward.loc[naive, model].astype(float),
                                  ref.loc[naive, model].astype(float))


def test_the_backward_model_columns_are_the_byte_models_for_all_heads():
    row = {"B": 1, "H": 800, "N": 1024, "d": 64, "impl": "flash", "direction": contract.BACKWARD}
    model = hbm_plan.model_columns(row, 64, 128)
    by_rw = backward_model.bytes_by_rw("flash", 1024, 64, 64, 128, 2, contract.BACKWARD,
                                          contract.DQ_SEPARATE_PASS)
    assert model["model_read_bytes"] == 800 * by_rw["R"] and model["model_write_bytes"] == 800 * by_rw["W"]
    assert model["model_consistent_bytes"] == 800 * backward_model.model_bytes(
        "flash", 1024, 64, 64, 128, 2, contract.BACKWARD, contract.DQ_SEPARATE_PASS)
    assert model["model_lab_bytes"] is None and (model["model_B_r"], model["model_B_c"]) == (64, 128)
    assert model["compulsory_bytes"] == 800 * 8 * 1024 * 64 * 2
    naive = hbm_plan.model_columns({**row, "impl": "naive"}, 64, 128)
    assert naive["model_read_bytes"] == 800 * backward_model.bytes_by_rw("naive", 1024, 64, 1, 1, 2)["R"]
    assert naive["model_B_r"] is None
    # the gradients' writes: counted in the writes, left out of the consistent total
    grads = 800 * 3 * 1024 * 64 * 2
    assert naive["model_read_bytes"] + naive["model_write_bytes"] == naive["model_consistent_bytes"] + grads
    # a row whose kernel added dQ in its dK/dV kernel (`hbm.measure` says so) is set beside that model
    rmw = hbm_plan.model_columns({**row, "dq_accumulation": contract.DQ_IN_L2}, 64, 128)
    assert rmw["model_consistent_bytes"] == 800 * backward_model.model_bytes(
        "flash", 1024, 64, 64, 128, 2, contract.BACKWARD, contract.DQ_IN_L2)
    assert rmw["model_consistent_bytes"] != model["model_consistent_bytes"]


def test_without_cuda_the_backward_rows_say_not_measured_with_the_model_beside():
    rows = pd.DataFrame(hbm_plan.planned_rows(CFG, L2, hbm_plan.NO_CUDA))
    backward = rows[rows["direction"] == contract.BACKWARD]
    assert len(backward) == len(rows) / 2 and (backward["status"] == hbm_plan.NO_CUDA).all()
    assert backward["dram_read_bytes"].isna().all() and backward["model_read_bytes"].gt(0).all()
    assert (backward.loc[backward["impl"] == "flash", "model_B_r"] == contract.LAB_TILE[0]).all()
    summary = hbm_plan.summary(rows, None, L2)
    assert summary["measured"] == 0 and summary["status"] == hbm_plan.NO_CUDA


@requires_gpu
@pytest.mark.gpu
def test_the_backwards_dram_bytes_on_the_gpu(tmp_path):
    """On a GPU with ncu: the backward rows are measured, flash's kernels are the Triton backward's
    three, and with many heads flash reads fewer DRAM bytes than naive's autograd backward."""
    ncu = ncu_tool.find_ncu()
    if ncu is None:
        pytest.skip("ncu not found")
    rows, kernels = hbm.measure({**CFG, "n": [4096], "head_dims": [64]}, L2, 0, ncu, tmp_path)
    table = pd.DataFrame(rows)
    backward = table[table["direction"] == contract.BACKWARD]
    assert (backward["status"] == contract.MEASURED).all(), backward["status"].tolist()
    flash = backward[backward["impl"] == "flash"]
    assert flash["kernel_names"].str.contains("_bwd_dkdv_kernel").all()
    assert flash["kernel_names"].str.contains("_bwd_dq_kernel").all()
    assert flash["kernel_names"].str.contains("_bwd_preprocess").all()
    assert not flash["kernel_names"].str.contains("_flash_fwd").any()  # the forward ran before the range
    many = backward[(backward["regime"] == "many heads") & ~backward["causal"]].set_index("impl")
    assert many.loc["flash", "dram_read_bytes"] < many.loc["naive", "dram_read_bytes"]
    assert (backward["dram_read_bytes"] >= 0.5 * backward["compulsory_bytes"] * 5 / 8).all()  # Q, K, V, O, dO


@pytest.mark.parametrize("causal", [False, True])
def test_the_profiled_calls_are_the_backward_alone_and_give_dq(causal):
    """The calls the probe profiles, on the GPU where there is one, else on the CPU with the kernel
    under Triton's interpreter: each returns dQ, naive's from autograd with the forward run before
    the call, flash's from the Triton backward; a second call gives the same dQ (naive's graph, P in
    it, kept)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 64, 64, generator=gen).half().to(DEVICE) for _ in range(3))

    def do_generator():
        return torch.Generator(device=DEVICE).manual_seed(1)

    row = {"impl": "naive", "causal": causal, "direction": contract.BACKWARD}
    naive = hbm_probe.call(row, None, q, k, v, do_generator())[0]
    flash = hbm_probe.call({**row, "impl": "flash"}, None, q, k, v, do_generator())[0]
    first = naive()
    assert torch.equal(naive(), first) and first.shape == q.shape and first.dtype == q.dtype
    do = torch.randn(q.shape, device=DEVICE, dtype=q.dtype, generator=do_generator())
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    mask = torch.ones(64, 64, dtype=torch.bool, device=DEVICE).triu(1)
    s = (leaves[0] @ leaves[1].transpose(-1, -2) / 8)
    s = s.masked_fill(mask, float("-inf")) if causal else s
    (torch.softmax(s, -1) @ leaves[2]).backward(do.double())
    exact = leaves[0].grad
    assert (first.double() - exact).abs().max() < 2e-2
    assert (flash().double() - exact).abs().max() < 2e-2


def test_the_dq_model_is_read_from_the_backwards_recorded_dq_and_the_reference_still_reads():
    """`hbm.dq_accumulation` reads the configuration's `dq` (`BwdConfig.dq`): dQ added in the dK/dV
    kernel takes the L2 model, a dQ pass the plan's. The committed reference, recorded before the
    flags, is read as it was: each of the kernel's backward rows keeps its own dq model, and the
    model beside it is the one its recorded tile and dq model give."""
    assert hbm.dq_accumulation({"cfg_dq": "in_kernel"}) == contract.DQ_IN_L2
    for recorded in ({"cfg_dq": "tl_pass"}, {"cfg_dq": "gluon_pass"}, {}):
        assert hbm.dq_accumulation(recorded) is None
    ref = contract.with_direction(pd.read_csv(REF / contract.GPU_BYTES))
    rows = ref[(ref["impl"] == "flash") & (ref["direction"] == contract.BACKWARD)
               & (ref["status"] == "measured")]
    assert len(rows) and set(rows["dq_accumulation"]) == {contract.DQ_SEPARATE_PASS}
    for row in rows.to_dict("records"):
        model = hbm_plan.model_columns(row, int(row["cfg_BLOCK_M1"]), int(row["cfg_BLOCK_N1"]))
        for column in ("model_read_bytes", "model_write_bytes", "model_consistent_bytes"):
            assert model[column] == row[column], (column, row)
