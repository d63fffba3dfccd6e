"""Decode through stages 1 and 2: the model's rows on the grid (the cap, the splits, the ragged
lengths), the split-KV reference against float64, and the CPU's counted bytes beside the model."""

import pandas as pd
import pytest
import torch

from minimodel import symbolic
from minimodel.cpu import decode as cpu_decode
from minimodel.floor import contract, decode_grid
from minimodel.floor.byte_model import decode as model
from minimodel.floor.correctness_rule import tolerance
from minimodel.floor.decode_ref import naive_decode

NAIVE, SPLIT = contract.NAIVE_SCHEME, contract.SPLIT_KV_SCHEME
GRID = {"len_q": [1, 4], "kv_len": [1024, 131072], "batch": [1, 64], "heads": [[32, 8], [32, 32]],
        "head_dims": [128], "dtypes": ["float16"], "ragged": [False, True], "max_cache_bytes": 16 * 10**9,
        "sm_count": 132, "bandwidth_bytes_per_s": 4.8e12}


def test_ragged_lengths_run_from_the_cache_length_down_to_half():
    assert decode_grid.ragged_lengths(1, 4096, 4) == (4096,)
    assert decode_grid.ragged_lengths(3, 4096, 4) == (4096, 3072, 2048)
    assert decode_grid.ragged_lengths(5, 6, 4) == (6, 6, 5, 4, 4)  # never below L_q


def test_the_cap_leaves_out_the_caches_over_it_and_a_batch_of_one_is_never_ragged():
    points = decode_grid.points(GRID, GRID["max_cache_bytes"])
    assert all(p.cache_bytes <= 16 * 10**9 for p in points)
    # 32/32 heads at batch 64 and 131072 keys: 137 GB, left out; 32/8 there is 34 GB, left out too
    assert not any(p.batch == 64 and p.kv_len == 131072 for p in points)
    assert any(p.batch == 1 and p.kv_len == 131072 and p.heads_kv == 32 for p in points)
    assert not any(p.batch == 1 and p.ragged for p in points)
    # L_q × heads × (1024: batch 1, batch 64 ragged or not; 131072: batch 1)
    assert len(points) == 2 * 2 * (1 + 2 + 1)


def test_stage_one_rows_are_the_model_at_each_point_and_split():
    table = symbolic.decode_table(GRID)
    one = table[(table["B"] == 1) & (table["kv_len"] == 131072) & (table["H_kv"] == 8) & (table["L_q"] == 1)]
    # naive, split-KV with one split, and the policy's 16 splits (8 programs for 132 SMs)
    assert list(zip(one["scheme"], one["splits"], strict=True)) == [(NAIVE, 1), (SPLIT, 1), (SPLIT, 16)]
    for _, row in one.iterrows():
        assert row["bytes"] == model.model_bytes(row["scheme"], 1, 32, 8, 1, [131072], 128, 2, row["splits"])
        assert row["bound_us"] == pytest.approx(row["bytes"] / 4.8e12 * 1e6)
    assert (one["kv_cache_bytes"] == 2 * 131072 * 8 * 128 * 2).all()
    # batch 64 × 8 KV heads fill the SMs: no split row past one
    full = table[(table["B"] == 64) & (table["H_kv"] == 8)]
    assert set(full["splits"]) == {1}
    ragged = table[table["ragged"]]
    assert (ragged["total_kv"] < ragged["B"] * ragged["kv_len"]).all()
    formulas = symbolic.decode_formulas_table()
    assert len(formulas) == 4 and formulas["bytes"].str.contains("H_kv*T", regex=False).all()


def test_the_split_kv_reference_matches_float64():
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(3, 4, 8, 64, generator=gen).half()
    k, v = (torch.randn(3, 300, 2, 64, generator=gen).half() for _ in range(2))
    lengths = [4, 130, 300]
    exact = naive_decode(q, k, v, lengths, upcast=True)
    err_torch = (naive_decode(q, k, v, lengths).double() - exact).abs().max().item()
    for splits in (1, 3, 8):
        out = torch.empty_like(q)
        parts = torch.empty(3, 8, 4, splits, 64), torch.empty(3, 8, 4, splits)
        cpu_decode.split_kv_decode_reference(q, k, v, lengths, out, *parts, splits=splits, block_n=64)
        err = (out.double() - exact).abs().max().item()
        print(f"splits {splits}: reference {err:.2e} torch {err_torch:.2e}")
        assert err <= tolerance(err_torch)


@pytest.mark.parametrize(("len_q", "ragged"), [(1, False), (4, True)])
def test_the_counted_bytes_are_the_model_s(len_q, ragged):
    # a small point with a small on-chip budget, so that it behaves as the grid's do: the naive
    # scores (8 heads × L_q × 512 keys and more, fp16) exceed it, the tiles and the query group fit
    point = decode_grid.DecodePoint(2, len_q, 8, 2, 64, 1024, ragged, "float16")
    rows = pd.DataFrame(cpu_decode.sweep([point], [1, 4], block_n=32, sram_bytes=8192))
    print(rows[["scheme", "splits", "bytes_model", "bytes_instrumented", "deviation"]])
    assert list(rows["scheme"]) == [NAIVE, SPLIT, SPLIT]
    assert rows["deviation"].abs().max() <= 0.05
    assert (rows["bytes_read"] + rows["bytes_written"] == rows["bytes_instrumented"]).all()
    # the combine's partials: 4 splits write and read back (d + 1) fp32 values a row
    split = rows[rows["scheme"] == SPLIT].set_index("splits")["bytes_instrumented"]
    assert split[4] - split[1] == 2 * 4 * 2 * 8 * len_q * 65 * 4


def test_an_unknown_scheme_is_refused():
    with pytest.raises(ValueError, match="unknown decode scheme 'flash'; accepted: naive, split-kv"):
        cpu_decode.measure(decode_grid.DecodePoint(1, 1, 2, 1, 64, 8, False, "float16"), "flash")


def test_the_tiny_run_measures_decode_within_five_percent_of_the_model(tiny_run):
    results = tiny_run.root / "results"
    cpu = pd.read_csv(results / contract.DECODE_CPU)
    assert len(cpu) and cpu["deviation"].abs().max() <= 0.05
    assert set(cpu["scheme"]) == {NAIVE, SPLIT}
    table = pd.read_csv(results / contract.DECODE_SYMBOLIC)
    assert len(table) and (table["bytes"] > 0).all()
