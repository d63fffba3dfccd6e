"""The results README states the results' numbers, and says so when there was no GPU."""

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from minimodel.floor import contract
from minimodel.gpu import grids, hbm_plan
from minimodel.report import results_readme

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "results" / "reference" / "nvidia-h200"
TEMPLATE = ROOT / "workflow" / "report" / "README.md.j2"
HEADLINE = ROOT / "workflow" / "report" / "headline.rst.j2"
DOUBLED = re.compile(r"\b([A-Za-z]{2,})[\s`*]+\1\b", re.IGNORECASE)  # a word twice, markup between or not
pytestmark = pytest.mark.skipif(not (REF / "gpu" / "timing" / "timing.json").exists(),
                                reason="no reference run committed")


def ref_paths(**override):
    paths = {
        "symbolic": REF / "symbolic" / "bytes.csv",
        "cpu_bytes": REF / "cpu" / "bytes.csv",
        "cpu_ceilings": REF / "cpu" / "roofline" / "ceilings.json",
        "correctness": REF / "gpu" / "correctness" / "correctness.json",
        "timing": REF / "gpu" / "timing" / "timing.json",
        "timing_table": REF / "gpu" / "timing" / "timing.csv",
        "gpu_bytes": REF / "gpu" / "bytes" / "bytes.csv",
        "gpu_bytes_summary": REF / "gpu" / "bytes" / "bytes.json",
        "benchmarks": sorted((REF / "benchmarks").glob("cpu_*.tsv")),
    }
    return {**paths, **override}


def test_readme_numbers_equal_the_results():
    numbers = results_readme.collect(ref_paths())
    text = results_readme.render(TEMPLATE, numbers)
    corr = json.loads((REF / "gpu" / "correctness" / "correctness.json").read_text())
    assert f"{corr['max_err_kernel_vs_fp64']:.2e}" in text
    rows = contract.forward_rows(pd.read_csv(REF / "gpu" / "timing" / "timing.csv"))  # the forward's answers
    lab = rows[(rows["grid"] == "lab") & (rows["impl"] == "naive")]
    for value in lab["triton_speedup_over_this"]:
        assert f"{value:,.2f}×" in text
    kernel = rows[(rows["grid"] == "lab") & (rows["impl"] == "triton")].set_index(["N", "causal"])
    for _, r in lab.iterrows():
        kernel_eager = kernel.loc[(r["N"], r["causal"]), "eager_ms"]
        assert f"{r['eager_ms'] / kernel_eager:,.2f}× ({kernel_eager:.4f})" in text
    fa = rows[(rows["grid"] == "flashattention") & (rows["impl"] == "sdpa_cudnn")]
    for _, r in fa.iterrows():
        assert f"| {r['d']} | {r['N']} | {r['causal']} | {r['triton_speedup_over_this']:,.2f} |" in text
    ceilings = json.loads((REF / "cpu" / "roofline" / "ceilings.json").read_text())
    assert f"{ceilings['peak_flops_per_s'] / 1e9:,.1f} GFLOP/s" in text
    assert ceilings["device"] in text and "NVIDIA H200" in text
    assert f"{numbers['intensity']['ratio']:,.2f}" in text


def test_readme_without_gpu_says_so(tmp_path):
    no_gpu = tmp_path / "timing.json"
    no_gpu.write_text(json.dumps({"device": None, "status": contract.NO_GPU_TIMING}))
    table = tmp_path / "timing.csv"
    cfg = {**grids.default_timing_config(), "lab_n": [64], "fa_n": [1024], "fa_head_dims": [64]}
    pd.DataFrame(grids.no_gpu_timing_rows(cfg)).to_csv(table, index=False)
    planned = pd.DataFrame(hbm_plan.planned_rows({"n": [256], "head_dims": [64], "many_heads_l2_multiple": 2,
                                             "ncu": None}, 2**20, hbm_plan.NO_CUDA))
    planned.to_csv(tmp_path / "bytes.csv", index=False)
    (tmp_path / "bytes.json").write_text(json.dumps(hbm_plan.summary(planned, None, 2**20)))
    paths = ref_paths(timing=no_gpu, timing_table=table, gpu_bytes=tmp_path / "bytes.csv",
                      gpu_bytes_summary=tmp_path / "bytes.json")
    numbers = results_readme.collect(paths)
    text = results_readme.render(TEMPLATE, numbers)
    assert "this machine has no CUDA device" in text
    assert "No GPU timing was possible on this machine" in text
    # the status says "not measured" itself: said once
    assert f"Not measured in this run: {hbm_plan.NO_CUDA.removeprefix('not measured: ')}." in text
    reference = results_readme.collect(ref_paths())
    for page in (text, results_readme.render(HEADLINE, numbers),
                 *(results_readme.render(t, reference) for t in (TEMPLATE, HEADLINE))):
        assert "not measured: not measured" not in page.lower()
        assert not DOUBLED.findall(page), DOUBLED.findall(page)  # "float16, naive naive" was one


def test_readme_gpu_bytes_are_the_tables():
    numbers = results_readme.collect(ref_paths())
    text = results_readme.render(TEMPLATE, numbers)
    table = contract.forward_rows(pd.read_csv(REF / "gpu" / "bytes" / "bytes.csv"))  # lab 01's: the forward
    point = table[(table["N"] == 4096) & (table["d"] == 64) & ~table["causal"]]
    ours = point["impl"].isin(["naive", "flash"])
    assert ours.sum() == 4 and (point["status"] == "measured").all()
    for _, r in point.iterrows():  # a contender's row has no model: a dash
        cells = [f"{r[c] / 2**20:,.1f} MiB" if pd.notna(r[c]) else "—"
                 for c in ("dram_read_bytes", "dram_write_bytes", "l2_write_bytes", "model_read_bytes")]
        name = r["impl"] if r["impl"] in ("naive", "flash") else f"{r['impl']} (contender)"
        assert f"| {r['H']} | {name}" in text and " | ".join(cells) in text
    low, high = numbers["gpu_bytes"]["naive_many_read_over_model"]
    assert f"{low:,.2f}–{high:,.2f}× the model's" in text
    many = table[(table["regime"] == "many heads") & (table["impl"] == "naive") & (table["d"] == 64)
                 & (table["status"] == "measured") & ~table["causal"]]
    ratio = many["dram_read_bytes"] / many["model_read_bytes"]  # the forward's rows, every N
    assert (low, high) == (ratio.min(), ratio.max())


def test_readme_gpu_bytes_of_a_contender_have_no_model_and_a_line_of_their_own(tmp_path):
    table = pd.read_csv(REF / "gpu" / "bytes" / "bytes.csv")
    mine = table[table["impl"] == "flash"].assign(impl="mine")
    mine["dram_read_bytes"] *= 2
    mine[list(hbm_plan.MODEL_COLUMNS)] = None
    table = pd.concat([table[table["impl"] != "mine"], mine], ignore_index=True)
    table.to_csv(tmp_path / "bytes.csv", index=False)
    numbers = results_readme.collect(ref_paths(gpu_bytes=tmp_path / "bytes.csv"))
    text = results_readme.render(TEMPLATE, numbers)
    forward = contract.forward_rows(mine)  # the README's DRAM table is the forward's
    r = forward[(forward["N"] == 4096) & (forward["d"] == 64) & ~forward["causal"].astype(bool)].iloc[-1]
    assert f"| {r['H']} | mine (contender) | {r['dram_read_bytes'] / 2**20:,.1f} MiB |" in text
    assert "| — | — | — | — |" in text  # its model cells
    [c] = [c for c in numbers["gpu_bytes"]["contenders"] if c["name"] == "mine"]
    low, high = c["read_over_inputs"]
    assert f"- mine: DRAM reads {low:,.2f}–{high:,.2f}× Q, K and V once" in text
    # the flash numbers are the same as without the contender
    assert numbers["gpu_bytes"]["flash_read_over_inputs_max"] == results_readme.collect(
        ref_paths())["gpu_bytes"]["flash_read_over_inputs_max"]


def test_intensity_question_shows_its_arithmetic():
    q = results_readme.intensity_question()
    assert q["ratio"] == pytest.approx(q["naive_bytes"] / q["flash_bytes"])
    assert q["intensity_flash"] / q["intensity_naive"] == pytest.approx(q["ratio"])
