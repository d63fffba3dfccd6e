"""GPU DRAM bytes: the plan, the model beside it, and reading Nsight Compute's table.

The fixture tests/data/ncu_raw_h200.csv is the start of a real `ncu --import ... --csv --page raw
--print-units base` table from the H200 (columns trimmed to the ones read here and a few more):
the first four points of the plan, one head, N = 1024, d = 64.
"""

import stat
from pathlib import Path

import pandas as pd
import pytest
from conftest import HAS_CUDA, snakemake_until

from minimodel.contenders.spec import Contender
from minimodel.floor import contract
from minimodel.floor.byte_model import forward as forward_model
from minimodel.gpu import hbm, hbm_plan
from minimodel.gpu import ncu as ncu_tool

DATA = Path(__file__).parent / "data"
L2 = 50 * 2**20
CFG = {"n": [1024, 4096], "head_dims": [64, 128], "many_heads_l2_multiple": 2, "ncu": None}


def test_plan_has_every_point_and_enough_heads_to_overflow_the_l2():
    rows = hbm_plan.plan(CFG, L2)
    assert len(rows) == 2 * 2 * 2 * 2 * 2 * 2  # regimes x d x N x causal x implementations x directions
    for row in rows:
        tensor = row["H"] * row["N"] * row["d"] * 2
        if row["regime"] == "one head":
            assert row["H"] == 1
        else:  # each of Q, K, V, O alone is at least twice the L2, and one head fewer is not
            assert tensor >= 2 * L2 > (row["H"] - 1) * row["N"] * row["d"] * 2
    assert {(r["impl"], r["causal"]) for r in rows} == {(i, c) for i in ("naive", "flash")
                                                        for c in (False, True)}


def test_model_columns_are_the_symbolic_model_for_all_heads():
    row = {"B": 1, "H": 800, "N": 1024, "d": 64, "impl": "flash"}
    model = hbm_plan.model_columns(row, 128, 64)
    n, d, h = 1024, 64, 800
    assert model["model_read_bytes"] == h * (n * d + 2 * n * d * n / 128) * 2
    assert model["model_write_bytes"] == h * n * d * 2
    assert model["model_lab_bytes"] == h * forward_model.bytes_flash(n, d, 128, 64)
    assert model["model_consistent_bytes"] == model["model_read_bytes"]  # O left out
    assert model["compulsory_bytes"] == h * 4 * n * d * 2
    naive = hbm_plan.model_columns({**row, "impl": "naive"}, 128, 64)
    assert naive["model_read_bytes"] == h * (3 * n * d + 2 * n * n) * 2
    assert naive["model_write_bytes"] == h * (2 * n * n + n * d) * 2
    assert naive["model_lab_bytes"] == h * forward_model.bytes_naive(n, d)
    assert naive["model_B_r"] is None


def test_model_by_direction_rejects_an_unknown_scheme():
    with pytest.raises(ValueError, match="unknown scheme 'flash2'"):
        forward_model.model_bytes_by_direction("flash2", 64, 64)


def _measured_rows():
    planned = hbm_plan.plan({**CFG, "n": [1024], "head_dims": [64]}, L2)
    rows = [{**r, "status": contract.MEASURED} for r in planned]
    return rows[:4]  # the fixture's four points: one head, N = 1024, d = 64


def test_planned_rows_say_why_nothing_was_measured():
    rows = pd.DataFrame(hbm_plan.planned_rows(CFG, L2, hbm_plan.NO_NCU, [Contender("mine", "m:f")]))
    assert (rows["status"] == hbm_plan.NO_NCU).all() and rows["dram_read_bytes"].isna().all()
    ours = rows["impl"] != "mine"
    assert rows[ours]["model_read_bytes"].gt(0).all() and rows[~ours]["model_read_bytes"].isna().all()
    assert ours.sum() == (~ours).sum() * 4  # the contender at every point (the forward's: 2 rows, 2 backward)
    summary = hbm_plan.summary(rows, None, L2)
    assert summary["measured"] == 0 and summary["status"] == hbm_plan.NO_NCU
    assert summary["contenders"] == ["mine"]


def test_a_point_the_device_cannot_hold_is_skipped_with_the_reason():
    row = hbm_plan.plan({**CFG, "n": [4096], "head_dims": [64]}, L2)[-2]  # many heads, naive
    assert hbm._check_memory(row, 2**40) == contract.MEASURED
    status = hbm._check_memory(row, row["device_bytes"])
    assert status.startswith("skipped: needs") and "gpu.bytes.many_heads_l2_multiple" in status


FAKE_NCU = r"""#!{python}
# Stands in for Nsight Compute. A profile run goes through the plan's measured rows as the probe
# would: it records each ("marked"), and keeps the rows it marked for `--import`, which prints a
# raw-page table of a marker and one kernel per marked row, named after the row's point. At
# their first point with N = 512 and not causal the contenders named raises, hangs and dies do
# so, late raises after its marker, restarts records a sticky CUDA error and exits for a fresh
# process, and nan's kernel reads "n/a"; loadfail's module does not load, and extra_marker's
# table has a marker too many.
import json, sys, time
from pathlib import Path
args = sys.argv[1:]
mode = "{mode}"
if "--version" in args:
    print("Version 0.0 (fake)")
elif "--import" in args:
    rows = json.loads(Path(args[args.index("--import") + 1] + ".marked").read_text())
    print('"ID","Kernel Name","dram__bytes_read.sum","dram__bytes_write.sum",'
          '"lts__t_sectors_srcunit_tex_op_write.sum"')
    print('"","","byte","byte","sector"')
    i = 0
    for row in rows:
        print(f'"{{i}}","minimodel_bytes_marker","0","0","1"')
        i += 1
        if row.get("empty"):
            continue
        read = "n/a" if row.get("nan") else f'{{row["N"]:,}}'
        name = f'kernel_{{row["impl"]}}_{{row["H"]}}_{{row["N"]}}_{{row["causal"]}}'
        print(f'"{{i}}","{{name}}(int)","{{read}}","0","{{row["H"]}}"')
        i += 1
    if rows and rows[0]["impl"] == "extra_marker":
        print(f'"{{i}}","minimodel_bytes_marker","0","0","1"')
else:
    if mode == "noperm":
        print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission")
        sys.exit(1)
    if mode == "crash":
        print("Traceback: the probe failed", file=sys.stderr)
        sys.exit(3)
    plan_path = Path(args[-1])
    plan = json.loads(plan_path.read_text())
    name = (plan["contender"] or {{}}).get("name")
    marked = []
    code = 0
    for i, row in enumerate(plan["rows"]):
        if row["status"] != "measured":
            continue
        outcome = "marked"
        if row["N"] == 512 and not row["causal"]:
            if name == "hangs":
                time.sleep(600)
            if name == "dies":
                print("Segmentation fault in the contender", file=sys.stderr)
                print("==ERROR== The application returned an error code (139)")
                sys.exit(139)
            if name == "raises":
                outcome = "ValueError: deliberate"
            if name == "late":
                outcome = "marked, then ValueError: late"
                row = {{**row, "empty": True}}
            if name == "restarts":
                outcome, code = "AcceleratorError: CUDA error: an illegal memory access", 75
            if name == "nan":
                row = {{**row, "nan": True}}
        if name == "raises_everywhere":
            outcome = "RuntimeError: never runs"
        if name == "loadfail":
            outcome = "its module did not load: ImportError: no module named cutlass"
        with open(plan_path.with_suffix(".rows.jsonl"), "a") as f:
            f.write(json.dumps({{"row": i, "outcome": outcome}}) + "\n")
        if outcome.startswith("marked"):
            marked.append(row)
        if code:
            sys.exit(code)
    report = args[args.index("--export") + 1]
    if marked:  # as ncu: a report only where a kernel was profiled
        Path(report + ".ncu-rep").write_text("")
        Path(report + ".ncu-rep.marked").write_text(json.dumps(marked))
"""


def _fake_ncu(tmp_path, mode="ok"):
    import sys as _sys
    path = tmp_path / f"ncu_{mode}"
    path.write_text(FAKE_NCU.format(python=_sys.executable, mode=mode))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.fixture
def as_if_on_a_gpu(monkeypatch):
    """measure() as on a GPU with 1 TiB free, the tile of every flash row 64 x 64."""
    import torch
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (2**40, 2**40))
    monkeypatch.setattr(hbm, "_flash_config", lambda row: (64, 64, {"cfg_BLOCK_M": 64, "cfg_BLOCK_N": 64,
                                                                    "cfg_TMA": False}
                                                       if row["direction"] == contract.FORWARD
                                                       else {"cfg_BLOCK_M1": 64}))


def test_measure_runs_the_plan_under_ncu_and_fills_every_row(tmp_path, as_if_on_a_gpu):
    cfg = {**CFG, "n": [256], "head_dims": [64]}
    rows, kernels = hbm.measure(cfg, L2, 0, _fake_ncu(tmp_path), tmp_path / "work")
    table = pd.DataFrame(rows)
    assert len(table) == 16 and (table["status"] == contract.MEASURED).all()  # 8 forward, 8 backward
    assert (table["dram_read_bytes"] == 256).all() and (table["kernels"] == 1).all()
    assert (table["l2_write_bytes"] == table["H"] * 32).all()  # the row's own numbers, in order
    assert (table["model_read_bytes"] > 0).all() and len(kernels) == 32
    command = (tmp_path / "work" / "project_0.log").read_text().splitlines()[0]
    for option in (*ncu_tool.NCU_OPTIONS, "-m minimodel.gpu.hbm_probe", ",".join(ncu_tool.NCU_METRICS)):
        assert option in command


def test_measure_without_counter_permission_plans_and_says_why(tmp_path, as_if_on_a_gpu):
    rows, kernels = hbm.measure(CFG, L2, 0, _fake_ncu(tmp_path, "noperm"), tmp_path / "work")
    assert {r["status"] for r in rows} == {hbm.NO_PERMISSION} and kernels.empty
    assert list(kernels.columns) == ncu_tool.KERNEL_COLUMNS  # kernels.csv keeps its header


def test_measure_fails_loudly_when_the_probe_fails(tmp_path, as_if_on_a_gpu):
    with pytest.raises(RuntimeError, match="(?s)ncu exited with 3.*the probe failed"):
        hbm.measure(CFG, L2, 0, _fake_ncu(tmp_path, "crash"), tmp_path / "work")


def test_measure_with_no_point_that_fits_runs_nothing(tmp_path, as_if_on_a_gpu, monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (2**10, 2**40))
    rows, kernels = hbm.measure(CFG, L2, 0, str(tmp_path / "no-ncu-needed"), tmp_path / "work")
    assert all(r["status"].startswith("skipped: needs") for r in rows) and kernels.empty
    assert all(r["model_read_bytes"] > 0 for r in rows)


def test_each_contender_is_profiled_apart_and_its_failures_stay_in_its_rows(tmp_path, as_if_on_a_gpu):
    cfg = {**CFG, "n": [256, 512], "head_dims": [64]}
    contenders = [Contender(name, f"somewhere:{name}", timeout_s=1)
                  for name in ("fine", "raises", "hangs", "dies", "late", "restarts", "nan")]
    contenders.append(Contender("cpu_only", "somewhere:f", devices=("cpu",)))
    contenders += [Contender(name, "somewhere:f")
                   for name in ("raises_everywhere", "loadfail", "extra_marker")]
    rows, kernels = hbm.measure(cfg, L2, 0, _fake_ncu(tmp_path), tmp_path / "work", contenders)
    table = pd.DataFrame(rows)
    assert len(table) == 8 * 4 + 8 * len(contenders)  # 8 points: 2 + 2 backward rows, 1 per contender
    by = {name: part for name, part in table.groupby("impl")}
    assert (by["flash"]["status"] == contract.MEASURED).all()
    assert (by["naive"]["status"] == contract.MEASURED).all()
    fine = by["fine"]
    assert (fine["status"] == contract.MEASURED).all() and (fine["dram_read_bytes"] == fine["N"]).all()
    assert fine["model_read_bytes"].isna().all() and fine["compulsory_bytes"].gt(0).all()
    at_512 = lambda part: (part["N"] == 512) & ~part["causal"]
    for name, status in (("raises", "failed: ValueError: deliberate"),
                         ("hangs", "failed: no answer within its time limit of 1 s: stopped"),
                         ("dies", "failed: its process died (exit code 139): Segmentation fault in the "
                                  "contender"),
                         ("late", "failed: ValueError: late"),
                         ("restarts", "failed: AcceleratorError: CUDA error: an illegal memory access"),
                         ("nan", "failed: ncu gave no value of dram_read_bytes for a kernel of this call")):
        part = by[name]
        assert (part[at_512(part)]["status"] == status).all(), (name, part[at_512(part)]["status"].tolist())
        assert part[at_512(part)]["dram_read_bytes"].isna().all()
        assert (part[~at_512(part)]["status"] == contract.MEASURED).all(), name  # its other points, measured
    assert by["cpu_only"]["status"].str.startswith("skipped: cpu_only runs on cpu").all()
    assert (by["raises_everywhere"]["status"] == "failed: RuntimeError: never runs").all()  # ncu: no report
    assert (by["loadfail"]["status"] == "failed: its module did not load: ImportError: no module named "
                                        "cutlass").all()
    assert by["extra_marker"]["status"].str.startswith("failed: ncu profiled 9 marked calls, the plan "
                                                       "measured 8").all()
    assert by["extra_marker"]["dram_read_bytes"].isna().all()
    # every kernel's row is the full table's row of its point: the measured rows' and nan's (its
    # kernels ran; their numbers were not usable)
    body = kernels[kernels["row"].notna()]
    assert len(body) == (table["status"] == contract.MEASURED).sum() + at_512(by["nan"]).sum()
    assert set(kernels["profile"]) >= {"project_0", "contender_fine_0", "contender_restarts_2"}
    point = table.loc[body["row"].astype(int)]
    names = [f"kernel_{r.impl}_{r.H}_{r.N}_{r.causal}(int)" for r in point.itertuples()]
    assert names == body["kernel"].tolist()


@pytest.mark.workflow
@pytest.mark.skipif(HAS_CUDA, reason="with a CUDA device the points are measured or ncu is missing")
def test_without_cuda_gpu_bytes_says_so_on_the_console(tmp_path):
    root, proc = snakemake_until(tmp_path, "gpu_bytes")
    table = pd.read_csv(root / "results" / "gpu" / "bytes" / "bytes.csv")
    assert table["status"].eq(hbm_plan.NO_CUDA).all() and table["dram_read_bytes"].isna().all()
    line = f"gpu_bytes: {hbm_plan.NO_CUDA}; results/gpu/bytes/bytes.csv lists the {len(table)} planned points"
    assert line in proc.stderr
    assert line in (root / "results" / "logs" / "gpu_bytes.log").read_text()
