"""The backward's byte model (stage 1), its CPU references and their measured bytes (stage 2)."""

import io

import pandas as pd
import pytest
import sympy as sp
import torch

from minimodel import symbolic
from minimodel.cpu import backward, bytecount, slow_memory
from minimodel.floor import attention_ref, contract
from minimodel.floor.attention_ref import reference_attn
from minimodel.floor.byte_model import backward as backward_model
from minimodel.floor.byte_model import forward as forward_model
from minimodel.floor.byte_model.backward import BACKWARD_DIRECTIONS
from minimodel.floor.byte_model.forward import B_c, B_r, N, d, dtype_bytes
from minimodel.floor.provenance import project
from minimodel.floor.provenance.configcheck import load_config


def _backward_rows(*grid):
    """Stage 1's rows of the backward alone and of forward + backward."""
    return pd.concat([symbolic.byte_table(*grid, direction=d) for d in BACKWARD_DIRECTIONS],
                     ignore_index=True)


RMW, SEPARATE = contract.DQ_READ_MODIFY_WRITE, contract.DQ_SEPARATE_PASS
BWD, FWD_BWD = contract.BACKWARD, contract.FWD_BWD
REFERENCE = project.root() / "results" / "reference" / "nvidia-h200"
DATA = project.root() / "tests" / "data"


# ---- stage 1: the closed forms ----------------------------------------------------------------
def test_naive_backward_is_seven_n_squared_and_five_n_d():
    # reads: P twice, dP, dS twice (5 N²), dO twice, V, K, Q (5 N·d); writes: dP, dS (2 N²)
    expected = (7 * N**2 + 5 * N * d) * dtype_bytes
    assert sp.simplify(backward_model.derived_bytes("naive") - expected) == 0
    rw = backward_model.bytes_by_rw("naive", 1024, 64, dtype_bytes=2)
    assert rw == {"R": (5 * 1024**2 + 5 * 1024 * 64) * 2, "W": (2 * 1024**2 + 3 * 1024 * 64) * 2}


def test_flash_backward_read_modify_write_counted_by_hand():
    kv_tiles = N / B_c
    # O, dO; K, V; Q, dO per K/V tile
    expected = (dtype_bytes * (2 * N * d + 2 * N * d + 2 * N * d * kv_tiles)
                + 4 * (N + 2 * N * kv_tiles)  # D written, LSE and D read per K/V tile
                + 4 * N * d * (2 * kv_tiles - 1)  # dQ_acc written N/B_c times, read back N/B_c - 1
                + 4 * N * d)  # dQ_acc read once more, to cast it
    assert sp.simplify(backward_model.derived_bytes("flash", BWD, RMW) - expected) == 0
    # B_r does not appear: Q tiles are cut finer or coarser, each still read once per K/V tile
    assert B_r not in backward_model.derived_bytes("flash", BWD, RMW).free_symbols


def test_flash_backward_dq_reduced_in_the_l2_counted_by_hand():
    # O, dO for D; K, V, Q, dO once; D written, LSE and D read once; the fp32 accumulator zeroed,
    # read by the first addition, written back, read by the cast: no tile size appears
    expected = dtype_bytes * 6 * N * d + 4 * 3 * N + 4 * 4 * N * d
    derived = backward_model.derived_bytes("flash", BWD, contract.DQ_IN_L2)
    assert sp.simplify(derived - expected) == 0
    assert not {B_r, B_c} & derived.free_symbols


def test_dq_reduced_in_the_l2_is_what_the_h200_read_for_the_in_kernel_path():
    """tests/data/bwd_ncu_kernels_h200.csv (ncu on an H200): the DRAM reads of every
    kernel of one call of the Gluon kernel's TMA-dQ path (zero fill, preprocess, dK/dV with dQ,
    cast) at (4, 16, 4096, 128) and (4, 32, 4096, 64), not causal, within 2 % of the model's; the
    read-modify-write model, which the stage set beside it before, reads about 7 times as much."""
    kernels = pd.read_csv(DATA / "bwd_ncu_kernels_h200.csv", thousands=",")
    for heads, d_ in ((64, 128), (128, 64)):
        call = f"(4, {heads // 4}, 4096, {d_}) causal=False"
        read = kernels.loc[kernels["call"] == f"tma {call}", "dram__bytes_read.sum"]
        assert len(read) == 4
        in_l2 = backward_model.bytes_by_rw("flash", 4096, d_, 128, 128, 2, BWD, contract.DQ_IN_L2)
        model = heads * in_l2["R"]
        assert abs(read.sum() / model - 1) < 0.02, (call, read.sum(), model)
        rmw = heads * backward_model.bytes_by_rw("flash", 4096, d_, 128, 128, 2, BWD, RMW)["R"]
        assert rmw > 6 * read.sum()


def test_flash_backward_separate_dq_pass_counted_by_hand():
    expected = (dtype_bytes * (2 * N * d + 2 * N * d + 2 * N * d * N / B_c  # D; dK/dV pass
                               + 2 * N * d + 2 * N * d * N / B_r)  # dQ pass: Q, dO once; K, V per Q tile
                + 4 * (N + 2 * N * N / B_c + 2 * N))
    assert sp.simplify(backward_model.derived_bytes("flash", BWD, SEPARATE) - expected) == 0


@pytest.mark.parametrize("scheme, dq", backward_model.variants())
def test_forward_plus_backward_is_their_sum_and_the_lse(scheme, dq):
    fwd = forward_model.derived_bytes(scheme, contract.CONSISTENT_CONVENTION)
    lse = 4 * N if scheme == "flash" else 0
    both = backward_model.derived_bytes(scheme, FWD_BWD, dq)
    assert sp.simplify(both - fwd - lse - backward_model.derived_bytes(scheme, BWD, dq)) == 0


def test_gradient_writes_are_what_the_convention_leaves_out():
    for scheme, dq in backward_model.variants():
        rw = backward_model.bytes_by_rw(scheme, 512, 64, 64, 64, 2, BWD, dq)
        left_out = 3 * 512 * 64 * 2  # dQ, dK, dV, once each
        model = backward_model.model_bytes(scheme, 512, 64, 64, 64, 2, BWD, dq)
        assert rw["R"] + rw["W"] - left_out == model


def test_at_long_sequences_the_byte_ratio_is_that_of_the_n_squared_terms():
    # naive: 7 N² values in the dtype; flash: Q and dO re-read per K/V tile (2 N²·d/B_c in the
    # dtype), LSE and D (2 N²/B_c fp32), the fp32 dQ accumulator written and read back
    # (2 N²·d/B_c) or, in a pass of its own, K and V re-read per Q tile (2 N²·d/B_r in the dtype)
    naive = backward_model.derived_bytes("naive")
    rmw = backward_model.derived_bytes("flash", BWD, RMW)
    separate = backward_model.derived_bytes("flash", BWD, SEPARATE)
    assert sp.simplify(sp.limit(naive / rmw, N, sp.oo)
                       - 7 * dtype_bytes * B_c / (2 * dtype_bytes * d + 8 + 8 * d)) == 0
    per_n_squared = 2 * dtype_bytes * d / B_c + 2 * dtype_bytes * d / B_r + 8 / B_c
    assert sp.simplify(sp.limit(naive / separate, N, sp.oo) - 7 * dtype_bytes / per_n_squared) == 0
    # fp16, d = 64, the lab's 64 × 64 tiles: flash moves fewer bytes, but not many fewer
    for dq, ratio in ((RMW, 14 / 12.125), (SEPARATE, 14 / 8.125)):
        got = (backward_model.model_bytes("naive", 2**20, 64, 64, 64, 2)
               / backward_model.model_bytes("flash", 2**20, 64, 64, 64, 2, dq=dq))
        assert got == pytest.approx(ratio, rel=1e-3)


def test_flops_follow_flashattentions_benchmarks():
    assert backward_model.flops(1024, 64) == 2.5 * 4 * 1024**2 * 64
    assert backward_model.flops(1024, 64, FWD_BWD) == 3.5 * 4 * 1024**2 * 64
    assert backward_model.flops(1024, 64, contract.FORWARD) == forward_model.flops(1024, 64)
    assert backward_model.attention_flops(4, 16, 4096, 128, True, FWD_BWD) == \
        3.5 * 4 * 16 * 4 * 4096**2 * 128 / 2


def test_bad_arguments_name_what_is_accepted():
    with pytest.raises(ValueError, match="accepted: naive, flash"):
        backward_model.model_bytes("naive_fp32_softmax", 64, 64)
    with pytest.raises(ValueError, match="accepted: backward, fwd\\+bwd"):
        backward_model.model_bytes("flash", 64, 64, direction="forward")
    with pytest.raises(ValueError, match="accepted: read-modify-write, separate pass, reduced in the L2"):
        backward_model.model_bytes("flash", 64, 64, dq="atomic")
    with pytest.raises(ValueError, match="dq must be None"):
        backward_model.model_bytes("naive", 64, 64, dq=RMW)
    with pytest.raises(ValueError, match="N must be a positive number"):
        backward_model.model_bytes("flash", 0, 64)
    with pytest.raises(ValueError, match="accepted: forward, backward, fwd\\+bwd"):
        backward_model.flops(64, 64, "sideways")


def test_backward_table_is_tidy():
    table = _backward_rows([64, 256], [64], [(64, 64), (128, 64)], ["float16", "float32"])
    assert set(table.direction) == {BWD, FWD_BWD}
    assert set(table.convention) == {contract.CONSISTENT_CONVENTION}
    assert set(table[table.scheme == "flash"].dq_accumulation) == set(backward_model.TABLE_DQ)
    assert table[table.scheme == "naive"].dq_accumulation.isna().all()
    keys = ["scheme", "direction", "dq_accumulation", "N", "d", "B_r", "B_c", "dtype"]
    assert not table.duplicated(keys).any()
    row = table.query("scheme == 'flash' and direction == 'backward' and N == 256 and B_r == 128 "
                      "and dtype == 'float16' and dq_accumulation == @SEPARATE")
    assert row.bytes.iloc[0] == backward_model.model_bytes("flash", 256, 64, 128, 64, 2, BWD, SEPARATE)
    assert row.intensity.iloc[0] == row.flops.iloc[0] / row.bytes.iloc[0]


def _rule_table(cfg):
    """What the symbolic rule writes as symbolic/bytes.csv."""
    grid = cfg["n"], cfg["head_dims"], cfg["tiles"], cfg["dtypes"]
    return symbolic.tidy_table(*grid)


def _forward_only(reference: pd.DataFrame) -> pd.DataFrame:
    """A committed table's forward rows without `direction` and the backward's own columns (those
    every forward row leaves empty)."""
    forward = contract.forward_rows(reference)
    backward_only = [c for c in reference.columns if forward[c].isna().all()]
    return forward.drop(columns=["direction", *backward_only])


def test_todays_forward_rows_are_the_committed_references_exactly():
    """tests/data/pre_backward_symbolic_bytes.csv is symbolic/bytes.csv of the H200 reference run
    of commit b11c757, made before the backward existed."""
    table = _rule_table(load_config()["symbolic"])
    assert set(table.direction) == set(contract.DIRECTIONS)
    forward = contract.forward_rows(table).drop(columns=["direction", "dq_accumulation"])
    # the forward's rows come first, in their order, and are written as they were
    assert (table.direction.iloc[:len(forward)] == contract.FORWARD).all()
    written = io.StringIO()
    forward.to_csv(written, index=False)
    assert written.getvalue() == (DATA / "pre_backward_symbolic_bytes.csv").read_text()
    # the committed reference's forward rows are today's, but for the columns of the backward
    committed = pd.read_csv(REFERENCE / contract.SYMBOLIC_BYTES, float_precision="round_trip")
    assert list(committed.columns) == list(table.columns)
    committed_forward = io.StringIO()
    _forward_only(committed).to_csv(committed_forward, index=False)
    assert committed_forward.getvalue() == written.getvalue()


def test_the_forward_cpu_rows_are_the_committed_references_but_for_direction():
    """tests/data/pre_backward_cpu_bytes.csv is cpu/bytes.csv of the H200 reference run of commit
    b11c757, made before the backward existed."""
    rows = pd.DataFrame([bytecount.measure(s, n, 64, t) for s in ("naive", "flash") for n in (256, 512)
                         for t in ("float32", "float16")])
    assert set(rows.direction) == {contract.FORWARD}
    keys = ["scheme", "N", "d", "dtype"]
    pre_backward = pd.read_csv(DATA / "pre_backward_cpu_bytes.csv")
    committed = pd.read_csv(REFERENCE / contract.CPU_BYTES)
    measured = rows.drop(columns="direction")
    for reference in (pre_backward, _forward_only(committed)):
        assert list(measured.columns) == list(reference.columns)
        # the profiler's columns are this machine's, the rest is counted and must be the same
        columns = [c for c in reference.columns if not c.startswith(("bytes_profiler", "profiler_"))]
        merged = measured[columns].merge(reference[columns], on=keys, suffixes=("", "_ref"))
        assert len(merged) == len(rows)
        for c in set(columns) - set(keys):
            assert (merged[c] == merged[c + "_ref"]).all(), c


def test_a_table_without_direction_is_all_forward():
    old = pd.DataFrame({"scheme": ["naive", "flash"], "bytes": [1.0, 2.0]})
    assert contract.forward_rows(old).equals(old)
    new = old.assign(direction=[contract.FORWARD, BWD])
    assert list(contract.forward_rows(new).scheme) == ["naive"]


# ---- stage 2: the CPU references ---------------------------------------------------------------
def _autograd_fp64(Q, K, V, dO, causal):
    q, k, v = (t.detach().double().requires_grad_() for t in (Q, K, V))
    reference_attn(q, k, v, causal=causal, upcast=True).backward(dO.double())
    return q.grad, k.grad, v.grad


def _inputs(gen, shape, dtype=torch.float64):
    return [torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype) for _ in range(4)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n, tile", [(128, (64, 64)), (100, (32, 48)), (77, (64, 16))])
def test_both_references_give_autograds_gradients_in_float64(gen, causal, n, tile):
    Q, K, V, dO = _inputs(gen, (2, 3, n, 32))
    expected = _autograd_fp64(Q, K, V, dO, causal)
    O, lse = backward.forward_with_lse(Q, K, V, causal, upcast=True)
    torch.testing.assert_close(O, reference_attn(Q, K, V, causal=causal, upcast=True))
    naive = attention_ref.attn_naive_backward(Q, K, V, attention_ref.softmax_probabilities(Q, K, causal), dO)
    flash = backward.attn_flash_backward_reference_cpu(Q, K, V, O, lse, dO, *tile, causal=causal)
    for got in (naive, flash):
        for g, e in zip(got, expected, strict=True):
            torch.testing.assert_close(g, e, rtol=0, atol=1e-12)


def test_float32_references_agree_with_float64_autograd_within_fp32_rounding(gen):
    Q, K, V, dO = _inputs(gen, (1, 2, 200, 64), torch.float32)
    expected = _autograd_fp64(Q, K, V, dO, causal=True)
    O, lse = backward.forward_with_lse(Q, K, V, causal=True)
    assert O.dtype == torch.float32 and lse.dtype == torch.float32
    flash = backward.attn_flash_backward_reference_cpu(Q, K, V, O, lse, dO, causal=True)
    naive = attention_ref.attn_naive_backward(Q, K, V, attention_ref.softmax_probabilities(Q, K, True), dO)
    for got in (naive, flash):
        for g, e in zip(got, expected, strict=True):
            assert g.dtype == torch.float32
            assert (g.double() - e).abs().max() < 1e-4 * max(1.0, e.abs().max().item())


def test_the_references_refuse_what_they_cannot_take(gen):
    Q, K, V, dO = _inputs(gen, (2, 64, 16))
    O, lse = backward.forward_with_lse(Q, K, V)
    with pytest.raises(ValueError, match="LSE must have shape"):
        backward.attn_flash_backward_reference_cpu(Q, K, V, O, lse[..., :-1], dO)
    with pytest.raises(ValueError, match="dO must have Q's shape"):
        backward.attn_flash_backward_reference_cpu(Q, K, V, O, lse, dO[..., :8])
    with pytest.raises(ValueError, match="tile sizes"):
        backward.attn_flash_backward_reference_cpu(Q, K, V, O, lse, dO, B_r=0)
    with pytest.raises(ValueError, match="P must have shape"):
        attention_ref.attn_naive_backward(Q, K, V, torch.ones(2, 64, 32), dO)
    with pytest.raises(ValueError, match="grouped K/V heads"):
        attention_ref.attn_naive_backward(Q[None], K[None, :1], V[None, :1], torch.ones(1, 2, 64, 64),
                                          dO[None])


# ---- stage 2: the measured bytes ----------------------------------------------------------------
@pytest.mark.parametrize("scheme", ["naive", "flash"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("n, d", [(256, 64), (512, 32), (256, 128)])
def test_measured_backward_bytes_are_within_five_percent_of_the_model(scheme, dtype, n, d):
    row = bytecount.measure(scheme, n, d, dtype, direction=contract.BACKWARD)
    assert abs(row["deviation"]) <= 0.05
    # the points of the workflow's grid, N a multiple of the tile: the count is the model's exactly
    assert row["bytes_instrumented"] == row["bytes_model"]
    assert row["direction"] == BWD


def test_a_flash_tail_tile_costs_a_whole_tiles_reads():
    # N = 300 with 64 × 64 tiles: 5 K/V tiles, the last of 44 rows, each re-reading all of Q,
    # dO, LSE and D: the model's N/B_c tiles taken as 5, i.e. at B_c = 60, is the count exactly
    tail = bytecount.measure("flash", 300, 32, "float32", direction=contract.BACKWARD)
    assert tail["bytes_instrumented"] == backward_model.model_bytes("flash", 300, 32, 64, 60, 4, dq=RMW)
    assert 0 < tail["deviation"] < 0.06


def test_the_gradients_writes_are_split_off_and_the_result_is_right(gen):
    Q, K, V, O, lse, dO = bytecount.backward_inputs("flash", 256, 64, "float32", random_seed=3)
    counted = bytecount.count_backward_bytes(
        bytecount.backward_reference("flash", 64, 64), (Q, K, V, O, lse, dO))
    assert counted["grad_write"] == 3 * 256 * 64 * 4  # dQ (cast from its accumulator), dK, dV
    expected = _autograd_fp64(Q, K, V, dO, causal=False)
    for g, e in zip(counted["result"], expected, strict=True):
        assert not isinstance(g, slow_memory.SlowMemoryTensor)
        assert (g.double() - e).abs().max() < 1e-4


def test_the_profiler_sees_the_backwards_allocations():
    row = bytecount.measure("naive", 256, 64, "float32", with_profiler=True, direction=contract.BACKWARD)
    # it sees dV, dP, dS, dQ, dK allocated, not the reads: under the model's total
    assert 0 < row["bytes_profiler"] < row["bytes_model"] + row["grad_write_bytes"]
    assert row["profiler_input_bytes"] > 0


def test_the_sweep_covers_every_point_and_names_itself():
    bar = io.StringIO()
    rows = bytecount.sweep([256], [32], ["float32"], progress=bar, direction=contract.BACKWARD)
    assert [(r["scheme"], r["N"]) for r in rows] == [("naive", 256), ("flash", 256)]
    assert "cpu backward bytes float32" in bar.getvalue()
    with pytest.raises(ValueError, match="accepted: naive, flash"):
        bytecount.measure("blocked", 64, 64, "float32", direction=contract.BACKWARD)
    with pytest.raises(ValueError, match="accepted: float16"):
        bytecount.measure("flash", 64, 64, "float64", direction=contract.BACKWARD)


# ---- what reads the tables ----------------------------------------------------------------------
def _with_backward(forward: pd.DataFrame, backward_rows: pd.DataFrame) -> pd.DataFrame:
    return pd.concat([forward, backward_rows], ignore_index=True)


def test_todays_figures_and_readme_read_only_the_forward_rows():
    from minimodel.report import plots, results_readme

    grid = [256, 512], [64], [(64, 64)], ["float32"]
    sym = symbolic.byte_table(*grid)
    both_sym = _with_backward(sym, _backward_rows(*grid))
    cpu = pd.DataFrame([bytecount.measure(s, n, 64, "float32") for s in ("naive", "flash")
                        for n in (256, 512)])
    backward = bytecount.sweep([256, 512], [64], ["float32"], direction=contract.BACKWARD)
    both_cpu = _with_backward(cpu, pd.DataFrame(backward))
    fig, data = plots.bytes_vs_n(both_cpu, "test machine")
    assert set(data["direction"]) == {contract.FORWARD} and len(data) == len(cpu)
    fig, ratio = plots.intensity_ratio(both_sym, (64, 64))
    plain = plots.intensity_ratio(sym, (64, 64))[1]
    assert ratio[plain.columns].equals(plain)
    assert results_readme.bytes_answers(both_sym, both_cpu) == results_readme.bytes_answers(sym, cpu)


def test_the_backward_bytes_figure_plots_the_model_and_the_cpu_points():
    from minimodel.report import backward_plots

    grid = [256, 512, 1024], [64], [(64, 64)], ["float32"]
    sym = _with_backward(symbolic.byte_table(*grid), _backward_rows(*grid))
    cpu = pd.DataFrame(bytecount.sweep([256, 512], [64], ["float32"], direction=contract.BACKWARD))
    fig, data = backward_plots.backward_bytes_vs_n(sym, cpu, (64, 64), "float32")
    model = data[data["source"] == "model"]
    assert set(model["variant"]) == {"naive", f"flash, dQ {RMW}", f"flash, dQ {SEPARATE}"}
    assert len(model) == 3 * 3
    points = data[data["source"] != "model"]
    assert sorted(points["variant"]) == ["flash, dQ " + RMW] * 2 + ["naive"] * 2
    # each measured point lies on its model's line (the counts are exact at these N)
    merged = points.merge(model, on=["variant", "N", "d"], suffixes=("", "_model"))
    assert len(merged) == 4 and (merged["value"] == merged["value_model"]).all()
    with pytest.raises(ValueError, match="no backward rows at B_r = 128"):
        backward_plots.backward_bytes_vs_n(sym, cpu, (128, 64), "float32")
    with pytest.raises(ValueError, match="no direction column"):
        backward_plots.backward_bytes_vs_n(symbolic.byte_table(*grid).drop(columns="direction"), None,
                                           (64, 64), "float32")
