"""Nsight Compute: finding it, reading its table, cutting the kernels at the markers, and
stopping a profiled process that hangs.

The fixture tests/data/ncu_raw_h200.csv is the start of a real `ncu --import ... --csv --page raw
--print-units base` table from the H200 (columns trimmed to the ones read here and a few more):
the first four points of the plan, one head, N = 1024, d = 64.
"""

import os
import stat
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from minimodel.floor.contract import MEASURED
from minimodel.gpu import hbm_plan, ncu

DATA = Path(__file__).parent / "data"
L2 = 50 * 2**20


def _measured_rows():
    cfg = {"n": [1024], "head_dims": [64], "many_heads_l2_multiple": 2, "ncu": None}
    return [{**r, "status": MEASURED} for r in hbm_plan.plan(cfg, L2)][:4]  # the fixture's four points


def test_real_ncu_table_is_read_in_bytes_and_split_at_the_markers():
    kernels = ncu.parse_ncu_csv((DATA / "ncu_raw_h200.csv").read_text())
    assert len(kernels) == 16 and kernels["id"].tolist() == list(range(16))
    # "2,816" with a thousands separator, bytes as they are; sectors of 32 bytes
    assert kernels.loc[0, "dram_read_bytes"] == 2816
    assert kernels.loc[1, "l2_write_bytes"] == 65536 * 32
    rows = ncu.assign(kernels, _measured_rows(), MEASURED)
    assert [r["kernels"] for r in rows] == [3, 1, 7, 1]  # naive: matmul, softmax, matmul (+ mask)
    assert "softmax_warp_forward" in rows[0]["kernel_names"]
    assert rows[1]["kernel_names"] == "_flash_fwd_kernel"
    body = kernels[kernels["kernel"] != ncu.MARKER]
    assert rows[0]["dram_read_bytes"] == body[body["row"] == 0]["dram_read_bytes"].sum()
    # the kernel stores O once: 1024 x 64 fp16
    assert rows[1]["l2_write_bytes"] == 1024 * 64 * 2
    assert kernels[kernels["kernel"] == ncu.MARKER]["row"].isna().all()


def test_a_count_that_does_not_match_the_plan_is_refused():
    kernels = ncu.parse_ncu_csv((DATA / "ncu_raw_h200.csv").read_text())
    with pytest.raises(ncu.ProbeMismatch, match="4 marked calls, the plan measured 3"):
        ncu.assign(kernels, _measured_rows()[:3], MEASURED)
    with pytest.raises(ncu.ProbeMismatch, match="before the first marker"):
        ncu.assign(kernels.iloc[1:].reset_index(drop=True), _measured_rows(), MEASURED)


def _raw(units: str, value: str = "1,000") -> str:
    header = '"ID","Kernel Name","dram__bytes_read.sum","dram__bytes_write.sum",' \
             '"lts__t_sectors_srcunit_tex_op_write.sum"'
    return "\n".join(["==PROF== Disconnected", header, f'"","","{units}","byte","sector"',
                      f'"0","{ncu.MARKER}","{value}","0","1"', f'"1","k(int)","{value}","5","2"'])


def test_details_page_gives_the_same_numbers_as_the_raw_page():
    lines = ['"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"']
    for i, name in enumerate([ncu.MARKER, "k(int)"]):
        lines += [f'"{i}","{name}","Command line profiler metrics","dram__bytes_read.sum","byte","1,000"',
                  f'"{i}","{name}","Command line profiler metrics","dram__bytes_write.sum","byte","{5 * i}"',
                  f'"{i}","{name}","Command line profiler metrics",'
                  f'"lts__t_sectors_srcunit_tex_op_write.sum","sector","{i + 1}"']
    details = ncu.parse_ncu_csv("\n".join(lines))
    raw = ncu.parse_ncu_csv(_raw("byte"))
    pd.testing.assert_frame_equal(details, raw)
    assert raw["l2_write_bytes"].tolist() == [32.0, 64.0]


def test_scaled_units_and_missing_metrics_are_refused():
    with pytest.raises(ncu.ProbeMismatch, match="--print-units base"):
        ncu.parse_ncu_csv(_raw("Kbyte"))
    with pytest.raises(ncu.ProbeMismatch, match="lacks the metrics"):
        ncu.parse_ncu_csv('"ID","Kernel Name","dram__bytes_read.sum"\n"","","byte"\n"0","k","1"')
    with pytest.raises(ncu.ProbeMismatch, match="no table of kernels"):
        ncu.parse_ncu_csv("==ERROR== the application returned an error")


def test_ncu_is_found_where_cuda_keeps_it(tmp_path, monkeypatch):
    fake = tmp_path / "cuda" / "bin" / "ncu"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\necho 'NVIDIA Nsight Compute\nVersion 2025.3.1.0'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    assert ncu.find_ncu(None) == str(fake)
    assert ncu.ncu_version(str(fake)) == "Version 2025.3.1.0"
    assert ncu.find_ncu(str(fake)) == str(fake)
    with pytest.raises(FileNotFoundError, match="gpu.bytes.ncu: .* is not an executable file"):
        ncu.find_ncu(str(tmp_path / "nowhere" / "ncu"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "none"))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    if not os.access("/usr/local/cuda/bin/ncu", os.X_OK):
        assert ncu.find_ncu(None) is None


def test_dram_writes_beyond_the_stores_set_the_row_aside():
    kernels = ncu.parse_ncu_csv((DATA / "ncu_raw_h200.csv").read_text())
    flash = kernels.index[kernels["kernel"] == "_flash_fwd_kernel"][0]
    kernels.loc[flash, "dram_write_bytes"] = 32 * kernels.loc[flash, "l2_write_bytes"]  # 4 MiB
    rows = ncu.assign(kernels, _measured_rows(), MEASURED)
    assert rows[1]["status"].startswith("suspect: DRAM took 32.0x the bytes the kernels stored")
    assert [r["status"] for r in rows[::2] + rows[3:]] == [MEASURED] * 3


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:  # a zombie is gone, waiting for its parent to read it
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _script(tmp_path, body: str) -> str:
    path = tmp_path / "fake_ncu"
    path.write_text(f"#!{sys.executable}\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_a_profiled_process_that_records_nothing_for_too_long_is_stopped(tmp_path):
    # records its first row, then hangs in a process of its own, as the profiled process under
    # ncu's launchers: stopped `row_limit_s` after that record, not at setup_s, all of it
    grandchild = tmp_path / "grandchild.pid"
    fake = _script(tmp_path, "import json, subprocess, sys, time\nplan = sys.argv[-1]\n"
                   "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
                   f"open({str(grandchild)!r}, 'w').write(str(p.pid))\n"
                   "with open(plan[:-5] + '.rows.jsonl', 'a') as f:\n"
                   "    f.write(json.dumps({'row': 0, 'outcome': 'marked'}) + '\\n')\n"
                   "time.sleep(600)\n")
    start = time.monotonic()
    result = ncu.profile(fake, "minimodel.gpu.hbm", {"rows": []}, tmp_path, "hangs", row_limit_s=1,
                         setup_s=30)
    assert time.monotonic() - start < 15
    assert result.returncode is None and result.table is None and result.outcome == {0: "marked"}
    pid = int(grandchild.read_text())
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)


def test_a_profiled_process_gets_the_setup_time_before_its_first_row(tmp_path):
    fake = _script(tmp_path, "import time\ntime.sleep(2)\nprint('done')\n")
    result = ncu.profile(fake, "minimodel.gpu.hbm", {"rows": []}, tmp_path, "slow", row_limit_s=0.5,
                         setup_s=5)
    assert result.returncode == 0 and "done" in result.log and result.outcome == {}
