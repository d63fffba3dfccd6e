"""tools/timing_stage.py: two timing tables judged as compare's timing part judges them."""

import shutil

import pandas as pd
import timing_stage
from conftest import REFERENCE

from minimodel.floor import contract


def test_a_run_judged_against_itself_agrees_and_a_slower_kernel_is_named(tmp_path, capsys):
    assert timing_stage.judge(REFERENCE, REFERENCE, tmp_path / "same") == 0
    said = capsys.readouterr().out
    assert "timing verdict: agree" in said
    assert (pd.read_csv(tmp_path / "same" / "timing_verdict.csv")["verdict"] != "disagree").all()
    slower = tmp_path / "slower"
    (slower / contract.TIMING).parent.mkdir(parents=True)
    table = pd.read_csv(REFERENCE / contract.TIMING)
    hit = (table["impl"] == contract.TRITON) & (table["grid"] == contract.LAB_GRID) & (table["N"] == 4096)
    table.loc[hit, "ms"] *= 1.5  # the kernel half as slow again at the lab grid's N = 4096
    table.to_csv(slower / contract.TIMING, index=False)
    shutil.copy(REFERENCE / contract.TIMING_SUMMARY, slower / contract.TIMING_SUMMARY)
    assert timing_stage.judge(slower, REFERENCE, None) == 1
    said = capsys.readouterr().out
    assert "timing verdict: disagree" in said and "lab (2, 4, 4096, 64)" in said
