"""GPU DRAM bytes: the plan, the model beside it, and reading Nsight Compute's table.

The fixture tests/data/ncu_raw_h200.csv is the start of a real `ncu --import ... --csv --page raw
--print-units base` table from the H200 (columns trimmed to the ones read here and a few more):
the first four points of the plan, one head, N = 1024, d = 64.
"""

import os
import stat
from pathlib import Path

import pandas as pd
import pytest
from conftest import HAS_CUDA, snakemake_until

from minimodel import symbolic
from minimodel.gpu import hbm

DATA = Path(__file__).parent / "data"
L2 = 50 * 2**20
CFG = {"n": [1024, 4096], "head_dims": [64, 128], "many_heads_l2_multiple": 2, "ncu": None}


def test_plan_has_every_point_and_enough_heads_to_overflow_the_l2():
    rows = hbm.plan(CFG, L2)
    assert len(rows) == 2 * 2 * 2 * 2 * 2  # regimes x d x N x causal x implementations
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
    model = hbm.model_columns(row, 128, 64)
    n, d, h = 1024, 64, 800
    assert model["model_read_bytes"] == h * (n * d + 2 * n * d * n / 128) * 2
    assert model["model_write_bytes"] == h * n * d * 2
    assert model["model_lab_bytes"] == h * symbolic.bytes_flash(n, d, 128, 64)
    assert model["model_consistent_bytes"] == model["model_read_bytes"]  # O left out
    assert model["compulsory_bytes"] == h * 4 * n * d * 2
    naive = hbm.model_columns({**row, "impl": "naive"}, 128, 64)
    assert naive["model_read_bytes"] == h * (3 * n * d + 2 * n * n) * 2
    assert naive["model_write_bytes"] == h * (2 * n * n + n * d) * 2
    assert naive["model_lab_bytes"] == h * symbolic.bytes_naive(n, d)
    assert naive["model_B_r"] is None


def test_model_by_direction_rejects_an_unknown_scheme():
    with pytest.raises(ValueError, match="unknown scheme 'flash2'"):
        symbolic.model_bytes_by_direction("flash2", 64, 64)


def _measured_rows():
    rows = [{**r, "status": hbm.MEASURED} for r in hbm.plan({**CFG, "n": [1024], "head_dims": [64]}, L2)]
    return rows[:4]  # the fixture's four points: one head, N = 1024, d = 64


def test_real_ncu_table_is_read_in_bytes_and_split_at_the_markers():
    kernels = hbm.parse_ncu_csv((DATA / "ncu_raw_h200.csv").read_text())
    assert len(kernels) == 16 and kernels["id"].tolist() == list(range(16))
    # "2,816" with a thousands separator, bytes as they are; sectors of 32 bytes
    assert kernels.loc[0, "dram_read_bytes"] == 2816
    assert kernels.loc[1, "l2_write_bytes"] == 65536 * 32
    rows = hbm.assign(kernels, _measured_rows())
    assert [r["kernels"] for r in rows] == [3, 1, 7, 1]  # naive: matmul, softmax, matmul (+ mask)
    assert "softmax_warp_forward" in rows[0]["kernel_names"]
    assert rows[1]["kernel_names"] == "_flash_fwd_kernel"
    body = kernels[kernels["kernel"] != hbm.MARKER]
    assert rows[0]["dram_read_bytes"] == body[body["row"] == 0]["dram_read_bytes"].sum()
    # the kernel stores O once: 1024 x 64 fp16
    assert rows[1]["l2_write_bytes"] == 1024 * 64 * 2
    assert kernels[kernels["kernel"] == hbm.MARKER]["row"].isna().all()


def test_a_count_that_does_not_match_the_plan_is_refused():
    kernels = hbm.parse_ncu_csv((DATA / "ncu_raw_h200.csv").read_text())
    with pytest.raises(hbm.ProbeMismatch, match="4 marked calls, the plan measured 3"):
        hbm.assign(kernels, _measured_rows()[:3])
    with pytest.raises(hbm.ProbeMismatch, match="before the first marker"):
        hbm.assign(kernels.iloc[1:].reset_index(drop=True), _measured_rows())


def _raw(units: str, value: str = "1,000") -> str:
    header = '"ID","Kernel Name","dram__bytes_read.sum","dram__bytes_write.sum",' \
             '"lts__t_sectors_srcunit_tex_op_write.sum"'
    return "\n".join(["==PROF== Disconnected", header, f'"","","{units}","byte","sector"',
                      f'"0","{hbm.MARKER}","{value}","0","1"', f'"1","k(int)","{value}","5","2"'])


def test_details_page_gives_the_same_numbers_as_the_raw_page():
    lines = ['"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"']
    for i, name in enumerate([hbm.MARKER, "k(int)"]):
        lines += [f'"{i}","{name}","Command line profiler metrics","dram__bytes_read.sum","byte","1,000"',
                  f'"{i}","{name}","Command line profiler metrics","dram__bytes_write.sum","byte","{5 * i}"',
                  f'"{i}","{name}","Command line profiler metrics",'
                  f'"lts__t_sectors_srcunit_tex_op_write.sum","sector","{i + 1}"']
    details = hbm.parse_ncu_csv("\n".join(lines))
    raw = hbm.parse_ncu_csv(_raw("byte"))
    pd.testing.assert_frame_equal(details, raw)
    assert raw["l2_write_bytes"].tolist() == [32.0, 64.0]


def test_scaled_units_and_missing_metrics_are_refused():
    with pytest.raises(hbm.ProbeMismatch, match="--print-units base"):
        hbm.parse_ncu_csv(_raw("Kbyte"))
    with pytest.raises(hbm.ProbeMismatch, match="lacks the metrics"):
        hbm.parse_ncu_csv('"ID","Kernel Name","dram__bytes_read.sum"\n"","","byte"\n"0","k","1"')
    with pytest.raises(hbm.ProbeMismatch, match="no table of kernels"):
        hbm.parse_ncu_csv("==ERROR== the application returned an error")


def test_planned_rows_say_why_nothing_was_measured():
    rows = pd.DataFrame(hbm.planned_rows(CFG, L2, hbm.NO_NCU))
    assert (rows["status"] == hbm.NO_NCU).all() and rows["dram_read_bytes"].isna().all()
    assert rows["model_read_bytes"].gt(0).all()
    summary = hbm.summary(rows, None, L2)
    assert summary["measured"] == 0 and summary["status"] == hbm.NO_NCU


def test_ncu_is_found_where_cuda_keeps_it(tmp_path, monkeypatch):
    fake = tmp_path / "cuda" / "bin" / "ncu"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\necho 'NVIDIA Nsight Compute\nVersion 2025.3.1.0'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    assert hbm.find_ncu(None) == str(fake)
    assert hbm.ncu_version(str(fake)) == "Version 2025.3.1.0"
    assert hbm.find_ncu(str(fake)) == str(fake)
    with pytest.raises(FileNotFoundError, match="gpu.bytes.ncu: .* is not an executable file"):
        hbm.find_ncu(str(tmp_path / "nowhere" / "ncu"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "none"))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    if not os.access("/usr/local/cuda/bin/ncu", os.X_OK):
        assert hbm.find_ncu(None) is None


def test_a_point_the_device_cannot_hold_is_skipped_with_the_reason():
    row = hbm.plan({**CFG, "n": [4096], "head_dims": [64]}, L2)[-2]  # many heads, naive
    assert hbm._check_memory(row, 2**40) == hbm.MEASURED
    status = hbm._check_memory(row, row["device_bytes"])
    assert status.startswith("skipped: needs") and "gpu.bytes.many_heads_l2_multiple" in status


def test_dram_writes_beyond_the_stores_set_the_row_aside():
    kernels = hbm.parse_ncu_csv((DATA / "ncu_raw_h200.csv").read_text())
    flash = kernels.index[kernels["kernel"] == "_flash_fwd_kernel"][0]
    kernels.loc[flash, "dram_write_bytes"] = 32 * kernels.loc[flash, "l2_write_bytes"]  # 4 MiB
    rows = hbm.assign(kernels, _measured_rows())
    assert rows[1]["status"].startswith("suspect: DRAM took 32.0x the bytes the kernels stored")
    assert [r["status"] for r in rows[::2] + rows[3:]] == [hbm.MEASURED] * 3


FAKE_NCU = r"""#!{python}
# Stands in for Nsight Compute: `--import` prints a raw-page table with a marker and one kernel
# per measured row of the plan it was run on; a profile run records the plan's path.
import json, sys
from pathlib import Path
args = sys.argv[1:]
mode = "{mode}"
if "--version" in args:
    print("Version 0.0 (fake)")
elif "--import" in args:
    plan = json.loads(Path(args[args.index("--import") + 1] + ".plan").read_text())
    print('"ID","Kernel Name","dram__bytes_read.sum","dram__bytes_write.sum",'
          '"lts__t_sectors_srcunit_tex_op_write.sum"')
    print('"","","byte","byte","sector"')
    i = 0
    for row in plan["rows"]:
        if row["status"] != "measured":
            continue
        print(f'"{{i}}","minimodel_bytes_marker","0","0","1"')
        print(f'"{{i + 1}}","kernel_{{row["impl"]}}(int)","{{row["N"]:,}}","0","{{row["H"]}}"')
        i += 2
else:
    if mode == "noperm":
        print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission")
        sys.exit(1)
    if mode == "crash":
        print("Traceback: the probe failed", file=sys.stderr)
        sys.exit(3)
    report = args[args.index("--export") + 1]
    Path(report + ".ncu-rep.plan").write_text(Path(args[-1]).read_text())
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
    monkeypatch.setattr(hbm, "_flash_config", lambda row: (64, 64, False))


def test_measure_runs_the_plan_under_ncu_and_fills_every_row(tmp_path, as_if_on_a_gpu):
    cfg = {**CFG, "n": [256], "head_dims": [64]}
    rows, kernels = hbm.measure(cfg, L2, 0, _fake_ncu(tmp_path), tmp_path / "work")
    table = pd.DataFrame(rows)
    assert len(table) == 8 and (table["status"] == hbm.MEASURED).all()
    assert (table["dram_read_bytes"] == 256).all() and (table["kernels"] == 1).all()
    assert (table["l2_write_bytes"] == table["H"] * 32).all()  # the row's own numbers, in order
    assert (table["model_read_bytes"] > 0).all() and len(kernels) == 16
    command = (tmp_path / "work" / "ncu.log").read_text().splitlines()[0]
    for option in (*hbm.NCU_OPTIONS, "-m minimodel.gpu.hbm", ",".join(hbm.NCU_METRICS)):
        assert option in command


def test_measure_without_counter_permission_plans_and_says_why(tmp_path, as_if_on_a_gpu):
    rows, kernels = hbm.measure(CFG, L2, 0, _fake_ncu(tmp_path, "noperm"), tmp_path / "work")
    assert {r["status"] for r in rows} == {hbm.NO_PERMISSION} and kernels.empty
    assert list(kernels.columns) == hbm.KERNEL_COLUMNS  # kernels.csv keeps its header


def test_measure_fails_loudly_when_the_probe_fails(tmp_path, as_if_on_a_gpu):
    with pytest.raises(RuntimeError, match="(?s)ncu exited with 3.*the probe failed"):
        hbm.measure(CFG, L2, 0, _fake_ncu(tmp_path, "crash"), tmp_path / "work")


def test_measure_with_no_point_that_fits_runs_nothing(tmp_path, as_if_on_a_gpu, monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (2**10, 2**40))
    rows, kernels = hbm.measure(CFG, L2, 0, str(tmp_path / "no-ncu-needed"), tmp_path / "work")
    assert all(r["status"].startswith("skipped: needs") for r in rows) and kernels.empty
    assert all(r["model_read_bytes"] > 0 for r in rows)


@pytest.mark.workflow
@pytest.mark.skipif(HAS_CUDA, reason="with a CUDA device the points are measured or ncu is missing")
def test_without_cuda_gpu_bytes_says_so_on_the_console(tmp_path):
    root, proc = snakemake_until(tmp_path, "gpu_bytes")
    table = pd.read_csv(root / "results" / "gpu" / "bytes" / "bytes.csv")
    assert table["status"].eq(hbm.NO_CUDA).all() and table["dram_read_bytes"].isna().all()
    line = f"gpu_bytes: {hbm.NO_CUDA}; results/gpu/bytes/bytes.csv lists the {len(table)} planned points"
    assert line in proc.stderr
    assert line in (root / "results" / "logs" / "gpu_bytes.log").read_text()
