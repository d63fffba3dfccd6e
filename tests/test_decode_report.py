"""The decode kernels compiled for Hopper on a machine without a GPU (tools/decode_report.py).

The compile runs in a subprocess without TRITON_INTERPRET (this session interprets the kernels),
in the background from the test run's start (conftest's `background`); `make test-compile` runs it.
"""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import background

ROOT = Path(__file__).resolve().parents[1]
# every head dim at the widest tile the tests use (L_q 4 × group 8 = 32 rows), in bfloat16, whose
# pointers kernel_report would type as fp32
ARGS = ("--d", "64", "128", "256", "--len-q", "4", "--group", "8", "--dtype", "bfloat16")


def make_report(folder: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "decode_report.py"), *ARGS,
                           "--csv", str(folder / "decode.csv")], env=env, capture_output=True, text=True)
    return {"returncode": proc.returncode, "said": proc.stdout[-3000:] + proc.stderr[-3000:]}


decode_report = background("decode_report", make_report)


@pytest.mark.compiles
def test_every_decode_kernel_compiles_for_sm90_without_spills(decode_report):
    folder, made = decode_report
    assert made["returncode"] == 0, made["said"]
    frame = pd.read_csv(folder / "decode.csv")
    print(frame.to_string(index=False))
    assert "error" not in frame
    assert sorted(frame["kernel"].unique()) == ["combine", "split", "split+partials"]
    assert len(frame) == 3 * 3 and set(frame["d"]) == {64, 128, 256}
    assert frame["fits_shared"].all() and (frame["spill_stack_bytes"] == 0).all()
    assert frame["registers"].between(1, 255).all()
