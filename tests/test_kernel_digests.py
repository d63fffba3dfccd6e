"""The compiled default, held still: tests/data/kernel_digests.csv (tools/kernel_digests.py) records,
for every point of both grids, both dtypes and every pass, what the policy picks on Hopper and a
digest of each launch's SASS for sm_90. `test_the_compiled_kernels_match_the_committed_digests`
compiles them all again (a few minutes on 2 cores, every kernel compiled once) and runs only where
MINIMODEL_COMPILE=1 (`make test-compile`, which CI runs); the tests of how the table is read and compared
run always.
"""

import os
import subprocess
import sys
from pathlib import Path

import kernel_digests
import pandas as pd
import pytest

from minimodel.gpu import grids

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "tests" / "data" / "kernel_digests.csv"

SASS = """
	code for sm_90a
		Function : _kernel
	.headerflags	@"EF_CUDA_SM90"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                  /* 0x00000a00ff017b82 */
                                                                          /* 0x000e220000000800 */
        /*0010*/                   LDC R2, c[0x0][0x210] ;                 /* 0x0000000000007919 */
        /*0020*/              @!P0 BRA 0x8360 ;                            /* 0x0000008000c08947 */
        /*0030*/                   CALL.REL `(_kernel$helper) ;            /* 0x0000008000c08947 */
        .L_x_1:
        /*0040*/                   EXIT ;                                  /* 0x000000000000794d */
"""


def test_instructions_are_read_without_addresses_encodings_or_names():
    lines = kernel_digests.instructions(SASS, "_kernel")
    assert lines == ["LDC R1, c[0x0][0x28]", "LDC R2, c[0x0][0x210]", "@!P0 BRA 0x8360",
                     "CALL.REL `(KERNEL$helper)", "EXIT"]
    renamed = SASS.replace("_kernel", "_renamed_kernel").replace("/*0010*/", "/*0011*/")
    assert kernel_digests.instructions(renamed, "_renamed_kernel") == lines


def test_a_changed_instruction_changes_the_digest_and_a_moved_parameter_only_the_exact_one():
    exact, masked = kernel_digests.digests(kernel_digests.instructions(SASS, "_kernel"))
    other = kernel_digests.digests(kernel_digests.instructions(SASS.replace("R2,", "R3,"), "_kernel"))
    assert other[0] != exact and other[1] != masked
    moved = kernel_digests.digests(kernel_digests.instructions(SASS.replace("0x210", "0x218"), "_kernel"))
    assert moved[0] != exact and moved[1] == masked


def test_differences_name_every_changed_missing_and_extra_row():
    table = kernel_digests.read(TABLE)
    assert kernel_digests.differences(table, table) == []
    changed = table.copy()
    changed.loc[3, "sass_sha256"] = "0" * 64
    said = kernel_digests.differences(table, changed)
    assert len(said) == 1 and f"sass_sha256: {table.loc[3, 'sass_sha256']} -> {'0' * 64}" in said[0]
    said = kernel_digests.differences(table, table.drop(index=[5]))
    assert len(said) == 1 and said[0].startswith("only in the committed table")
    said = kernel_digests.differences(table.drop(index=[5]), table)
    assert len(said) == 1 and said[0].startswith("not in the committed table")


def test_the_committed_table_covers_every_point_dtype_pass_and_launch():
    table = kernel_digests.read(TABLE)
    points = grids.points(grids.default_timing_config())
    expect = {(p.grid, str(p.B), str(p.H), str(p.N), str(p.d), str(p.causal), dtype, pass_)
              for p in points for dtype in kernel_digests.DTYPES for pass_ in kernel_digests.PASSES}
    found = set(table[["grid", "B", "H", "N", "d", "causal", "dtype", "pass"]].itertuples(index=False,
                                                                                          name=None))
    assert found == expect
    launches = table.groupby("pass")["launch"].agg(set).to_dict()
    assert launches["forward"] == launches["forward_lse"] == {"forward"}
    assert launches["backward"] == {"preprocess", "dkdv", "dq"}
    assert not table.duplicated(list(kernel_digests.KEY)).any()
    assert table["sass_sha256"].str.fullmatch(r"[0-9a-f]{64}").all()


@pytest.mark.compiles
def test_the_compiled_kernels_match_the_committed_digests():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # the tool compiles
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "kernel_digests.py"), "--quiet", "--check",
                           str(TABLE)], env=env, capture_output=True, text=True, cwd=ROOT)
    print(proc.stdout[-20000:], proc.stderr[-5000:])
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    assert f"0 differences from {TABLE}" in proc.stdout
    assert len(pd.read_csv(TABLE)) > 0
