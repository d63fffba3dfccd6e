import io
import json
import math

import pytest
import sympy as sp
from conftest import REFERENCE

from minimodel import symbolic
from minimodel.floor import contract
from minimodel.floor.byte_model import forward, theory
from minimodel.floor.byte_model.forward import B_r, N, d, dtype_bytes
from minimodel.floor.provenance.configcheck import load_config

MiB = 2**20


def test_derived_sums_equal_the_lab_formulas():
    lab = forward.lab_forms()
    for scheme in ("naive", "flash"):
        assert sp.simplify(forward.derived_bytes(scheme, "lab") - lab[scheme]) == 0


def test_consistent_convention_leaves_o_out_of_both():
    naive = forward.derived_bytes("naive", "consistent")
    flash = forward.derived_bytes("flash", "consistent")
    assert sp.simplify(naive - (3 * N * d + 4 * N**2) * dtype_bytes) == 0
    assert sp.simplify(flash - (N * d + 2 * N**2 * d / B_r) * dtype_bytes) == 0
    # the lab's flash formula counts O once more than the consistent one
    assert sp.simplify(forward.derived_bytes("flash", "lab") - flash - N * d * dtype_bytes) == 0


def test_fp32_softmax_accounting_is_24_n_squared_in_fp16():
    expr = forward.derived_bytes("naive_fp32_softmax", "consistent").subs(dtype_bytes, 2)
    assert sp.expand(expr) == sp.expand(6 * N * d + 24 * N**2)


def test_theory_worked_numbers():
    # theory 02: N=2048, d=64 -> naive 65.6 MiB (fp32 accounting), flash ~33 MiB with B_r=64
    naive = forward.bytes_naive(2048, 64, dtype_bytes=4)
    flash = forward.bytes_flash(2048, 64, 64, 64, dtype_bytes=4)
    assert naive == 12 * 2048 * 64 + 16 * 2048**2
    assert naive / MiB == pytest.approx(65.6, abs=0.1)  # 1.5 MiB + 64 MiB, printed as 65.6
    assert flash / MiB == pytest.approx(33.0, abs=0.01)
    # theory 02's intensity: 1.09e9 / 6.88e7 = 15.8 (it rounds both; exactly 15.94)
    i = forward.flops(2048, 64, "matmul+softmax") / naive
    assert i == pytest.approx(15.8, abs=0.15)
    assert forward.flops(2048, 64, "matmul+softmax") == pytest.approx(1.09e9, rel=0.01)


def test_lab_signatures_and_dtype_scaling():
    assert forward.bytes_naive(1024, 64) == (12 * 1024 * 64 + 16 * 1024**2) * 0.5
    assert forward.bytes_flash(1024, 64, 64, 64) == 8 * 1024 * 64 * (1 + 1024 / 64) * 0.5
    assert forward.bytes_naive(1024, 64, 4) == 2 * forward.bytes_naive(1024, 64, 2)


def test_flops_variants():
    assert forward.flops(128, 64) == 4 * 128 * 128 * 64
    assert forward.flops(128, 64, "matmul+softmax") == 4 * 128 * 128 * 64 + 5 * 128 * 128
    with pytest.raises(ValueError, match="matmul"):
        forward.flops(128, 64, "bogus")


@pytest.mark.parametrize("bad", [0, -1, 1.5j, "64", None, True])
def test_bad_sizes_are_rejected(bad):
    with pytest.raises(ValueError, match="N must be a positive number"):
        forward.bytes_naive(bad, 64)


def test_unknown_scheme_and_convention():
    with pytest.raises(ValueError, match="accepted: naive"):
        forward.model_bytes("flashy", 64, 64)
    with pytest.raises(ValueError, match="accepted: lab, consistent"):
        forward.model_bytes("naive", 64, 64, convention="mine")


def test_intensity_ratio_at_lab_question_point():
    # lab 01 F2: N=8192, d=128, B_r=B_c=64: the ratio is 4N^2+3Nd over Nd+2N^2 d/B_r
    ratio = (forward.intensity("flash", 8192, 128, 64, 64)
             / forward.intensity("naive", 8192, 128, 64, 64))
    n, hd = 8192, 128
    assert ratio == pytest.approx((3 * n * hd + 4 * n * n) / (n * hd + 2 * n * n * hd / 64))


def test_byte_table_is_tidy():
    table = symbolic.byte_table([64, 128], [64], [(64, 64), (128, 64)], ["float16", "float32"],
                                schemes=symbolic.SCHEMES)
    # naive_fp32_softmax exists only for 2-byte dtypes
    assert set(table.scheme) == set(symbolic.SCHEMES)
    assert set(table[table.scheme == "naive_fp32_softmax"].dtype) == {"float16"}
    assert not table.duplicated(["scheme", "convention", "N", "d", "B_r", "B_c", "dtype"]).any()
    row = table.query("scheme == 'naive' and convention == 'lab' and N == 128 and dtype == 'float16'")
    assert row.bytes.iloc[0] == forward.bytes_naive(128, 64, 2)
    assert math.isclose(row.intensity.iloc[0], 4 * 128 * 128 * 64 / row.bytes.iloc[0])


def test_lab_table_annotations():
    grid = [(64, 64), (1024, 64), (8192, 128)]
    table = symbolic.lab_table(grid, l1_bytes=256 * 1024, l2_bytes=50 * MiB)
    assert "16 KiB fits in L1" in table.note.iloc[0]
    assert "fits in L2" in table.note.iloc[1]
    assert "exceeds L2" in table.note.iloc[2]
    assert "lab = the lab's formulas" in symbolic.format_lab_table(table)


def test_formulas_table_marks_lab_agreement():
    table = symbolic.formulas_table()
    lab_rows = table[(table.convention == "lab") & table.scheme.isin(["naive", "flash"])]
    assert lab_rows.equals_lab_formula.all()


def test_sram_tile_bytes_matches_theory_example():
    # theory 02: d=64, fp32 everywhere, 64 x 64 tiles: 16 KiB + 48 KiB = 64 KiB
    assert theory.sram_tile_bytes(64, 64, 64, dtype_bytes=4, score_bytes=4) == 64 * 1024


def test_largest_tiles_fit_and_are_maximal():
    ans = theory.largest_tiles(128, 228 * 1024)
    for key in ("best", "best_power_of_two"):
        b = ans[key]
        assert b["bytes"] <= 228 * 1024
        assert b["area"] == b["B_r"] * b["B_c"]
    assert (ans["best_power_of_two"]["B_r"], ans["best_power_of_two"]["B_c"]) == (128, 128)
    best = ans["best"]
    # no larger multiple-of-16 rectangle fits
    for br in range(16, 1025, 16):
        for bc in range(16, 1025, 16):
            if br * bc > best["area"]:
                assert theory.sram_tile_bytes(br, bc, 128) > 228 * 1024


def test_sliding_window_tiles():
    # keys [i0-511, i0+63] span 575 keys: 9 tiles of 64 when i0 is tile-aligned
    assert theory.window_kv_tiles(512, 64, 64) == 9
    assert theory.window_kv_tiles(64, 64, 64) == 2
    assert theory.window_kv_tiles(1, 64, 64) == 1


def test_rescale_flops_and_practice_problems():
    assert theory.rescale_flops(8192, 128, 1) == 8192**2 * 128
    p = theory.practice_problems()
    assert p["p1_flash_bytes"]["flash_bytes_lab"] == forward.bytes_flash(8192, 128, 64, 64, 2)
    assert p["p3_sliding_window"]["dense_kv_tiles_per_q_tile"] == 128
    assert p["p4_B_c_to_1"]["rescale_flops_B_c_1"] == p["p4_B_c_to_1"]["matmul_flops"] / 4


def rule_outputs(cfg: dict) -> dict[str, str]:
    """The symbolic rule's outputs, by their contract name, as scripts/symbolic.py writes them."""
    grid = cfg["n"], cfg["head_dims"], cfg["tiles"], cfg["dtypes"]

    def csv(frame):
        text = io.StringIO()
        frame.to_csv(text, index=False)
        return text.getvalue()

    table = symbolic.lab_table(l1_bytes=cfg["l1_bytes"], l2_bytes=cfg["l2_bytes"])
    return {
        contract.SYMBOLIC_BYTES: csv(symbolic.tidy_table(*grid)),
        contract.SYMBOLIC_FORMULAS: csv(symbolic.formulas_table()),
        contract.SYMBOLIC_BACKWARD_FORMULAS: csv(symbolic.backward_formulas_table()),
        contract.SYMBOLIC_LAB_TABLE: symbolic.format_lab_table(table),
    }


def test_a_default_run_writes_the_committed_references_tables_byte_for_byte():
    """The committed H200 run's stage 1 was made with today's defaults (its manifest's parameters),
    and today's code writes its four files again byte for byte: every table, both passes, every
    closed form and the lab's table, so no number of the byte model has moved since."""
    manifest = json.loads((REFERENCE / contract.manifest("symbolic")).read_text())
    assert manifest["params"]["cfg"] == load_config()["symbolic"]
    written = rule_outputs(manifest["params"]["cfg"])
    assert set(written) == {o["path"].split(f"{REFERENCE.name}/", 1)[1] for o in manifest["outputs"]}
    for name, text in written.items():
        assert text == (REFERENCE / name).read_text(), name


def test_the_byte_for_byte_check_sees_one_byte_moved(monkeypatch):
    cfg = json.loads((REFERENCE / contract.manifest("symbolic")).read_text())["params"]["cfg"]
    exact = symbolic.model_bytes
    monkeypatch.setattr(symbolic, "model_bytes", lambda *args: exact(*args) + (args[1] == 64))
    written = rule_outputs(cfg)
    for name in (contract.SYMBOLIC_BYTES, contract.SYMBOLIC_LAB_TABLE):
        assert written[name] != (REFERENCE / name).read_text(), name
