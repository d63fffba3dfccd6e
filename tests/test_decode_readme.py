"""The results README's decode answers: every number read from the run's decode tables."""

import json

import pandas as pd
import pytest

from minimodel.floor import contract
from minimodel.floor.provenance import project
from minimodel.report import decode_answers, results_readme

TEMPLATE = project.root() / "workflow" / "report" / "README.md.j2"


def paths_of(results):
    readme = {key: str(results / name) for key, name in (
        ("symbolic", contract.SYMBOLIC_BYTES), ("cpu_bytes", contract.CPU_BYTES),
        ("cpu_ceilings", contract.CPU_CEILINGS), ("correctness", contract.CORRECTNESS_SUMMARY),
        ("timing", contract.TIMING_SUMMARY), ("timing_table", contract.TIMING),
        ("gpu_bytes", contract.GPU_BYTES), ("gpu_bytes_summary", contract.GPU_BYTES_SUMMARY))}
    readme["benchmarks"] = sorted(str(p) for p in (results / contract.BENCHMARKS).glob("cpu_*.tsv"))
    decode = {"symbolic": results / contract.DECODE_SYMBOLIC, "cpu": results / contract.DECODE_CPU,
              "gpu": results / contract.DECODE_GPU, "gpu_summary": results / contract.DECODE_GPU_SUMMARY,
              "timing": results / contract.TIMING_SUMMARY}
    return readme, decode


def test_the_readme_states_the_decode_models_numbers(tiny_run):
    readme_paths, decode_paths = paths_of(tiny_run.root / "results")
    found = decode_answers.answers(decode_paths)
    table = pd.read_csv(decode_paths["symbolic"])
    point = decode_answers.headline_point(table)
    assert found["model"]["point"]["kv_len"] == table["kv_len"].max() and point["L_q"] == 1
    assert found["model"]["intensity"] == pytest.approx(point["flops"] / point["bytes"])
    assert found["model"]["naive_over_split"] > 1 and found["model"]["splits"] > 1
    text = results_readme.render(TEMPLATE, {**results_readme.collect(readme_paths), "decode": found})
    section = text[text.index("## Decode"):text.index("## How long it took")]
    print(section)
    flat = " ".join(section.split())
    assert f"{found['model']['intensity']:,.2f} FLOP per" in flat
    assert f"{found['model']['bound_us']:,.1f} µs" in flat
    assert f"{found['model']['splits']} splits" in " ".join(section.split())
    assert "This run timed nothing" in section and contract.NO_GPU_TIMING in section
    # without the decode answers (a readme rule that does not pass them) the section is left out
    assert "## Decode" not in results_readme.render(TEMPLATE, results_readme.collect(readme_paths))


def test_timed_rows_give_each_implementation_s_fraction_and_the_split_gain(tiny_run, tmp_path):
    readme_paths, paths = paths_of(tiny_run.root / "results")
    gpu = pd.read_csv(paths["gpu"])
    gpu = gpu[gpu["backend"] == "cuda"].copy()
    gpu["status"] = contract.OK
    gpu["ms"] = 1.0
    gpu.loc[gpu["impl"] == contract.TRITON_ONE_SPLIT, "ms"] = 3.0  # the split kernel 3x faster
    gpu["cfg_splits"] = 4
    gpu["gb_per_s"] = 2000.0
    gpu["fraction_of_copy_bandwidth"] = 0.5
    paths["gpu"] = tmp_path / "decode.csv"
    gpu.to_csv(paths["gpu"], index=False)
    paths["gpu_summary"] = tmp_path / "decode.json"
    paths["gpu_summary"].write_text(json.dumps({"device": "NVIDIA H200", "bandwidth_bytes_per_s": 4e12,
                                                "rotation": "rotated", "kernel_passed": True}))
    paths["timing"] = tmp_path / "timing.json"
    ceilings = {"peak_flops_per_s": 8e14, "bandwidth_bytes_per_s": 4e12}
    paths["timing"].write_text(json.dumps({"ceilings": ceilings}))
    found = decode_answers.answers(paths)["gpu"]
    assert found["timed"] and found["ridge"] == 200
    points = len(gpu) // gpu["impl"].nunique()
    assert found["split_gain"]["best"] == 3.0 and found["split_gain"]["points"] == points
    assert {r["impl"] for r in found["impls"]} == set(gpu["impl"])
    text = results_readme.render(TEMPLATE, {**results_readme.collect(readme_paths),
                                            "decode": decode_answers.answers(paths)})
    flat = " ".join(text[text.index("## Decode"):text.index("## How long it took")].split())
    assert "On NVIDIA H200 the split kernel ran up to 3.00 × faster" in flat
    assert "it split at every timed point." in flat
    assert "this GPU's ridge point is 200.0 FLOP per byte" in flat
    assert "A fraction above 1 is no error" in flat and "4,000.0 GB/s" in flat
    assert f"| {contract.TRITON} | 0.50 | 0.50 | {points} |" in flat


def test_the_tiny_runs_readme_has_the_decode_section_and_says_what_was_not_measured(tiny_run):
    """The readme rule passes decode's answers: its README shows the section, and without a GPU says
    that decode was not timed, and why."""
    results = tiny_run.root / "results"
    text = (results / contract.RESULTS_README).read_text()
    section = " ".join(text[text.index("## Decode"):text.index("## How long it took")].split())
    found = decode_answers.answers(paths_of(results)[1])
    assert f"{found['model']['bound_us']:,.1f} µs" in section
    assert f"This run timed nothing ({contract.NO_GPU_TIMING})" in section
    assert f"Not measured here: {contract.NO_GPU_TIMING}." in section
    assert "passed its float64 check under Triton's interpreter" in section


def test_a_gpu_that_timed_no_point_says_why_from_its_rows():
    gpu = pd.DataFrame({"impl": [contract.TRITON, contract.NAIVE, contract.NAIVE], "backend": "cuda",
                        "status": [contract.FAILED_CHECK, contract.OUT_OF_MEMORY, contract.OUT_OF_MEMORY]})
    found = decode_answers.gpu_answers(gpu, {"device": "NVIDIA H100"}, {})
    assert not found["timed"]
    assert found["status"] == (f"on NVIDIA H100 no point passed its check and was timed "
                               f"(2 {contract.OUT_OF_MEMORY}, 1 {contract.FAILED_CHECK})")
