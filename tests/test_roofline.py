import pytest

from minimodel.cpu import roofline
from minimodel.floor import roofline_model
from minimodel.floor.byte_model.forward import model_bytes


def test_ceilings_are_positive_and_sane():
    c = roofline.measure_ceilings(matmul_n=256, copy_mib=16, repeats=3)
    assert 1e8 < c["peak_flops_per_s"] < 1e14  # between 0.1 GFLOP/s and 100 TFLOP/s on a CPU
    assert 1e8 < c["bandwidth_bytes_per_s"] < 1e13
    assert len(c["matmul"]["times_s"]) == 3
    assert c["ridge_intensity"] == pytest.approx(c["peak_flops_per_s"] / c["bandwidth_bytes_per_s"])


def test_attainable_is_the_roofline():
    assert roofline_model.attainable(2.0, peak=100.0, bandwidth=10.0) == 20.0
    assert roofline_model.attainable(50.0, peak=100.0, bandwidth=10.0) == 100.0


def test_prediction_memory_bound_is_the_byte_ratio():
    ceilings = {"peak_flops_per_s": 1e15, "bandwidth_bytes_per_s": 1e9}  # everything memory-bound
    p = roofline_model.predict_speedup(ceilings, 2048, 64, 64, 64)
    ratio = model_bytes("naive", 2048, 64, 64, 64, 4) / model_bytes(
        "flash", 2048, 64, 64, 64, 4)
    assert p["predicted_speedup"] == pytest.approx(ratio)
    assert p["bound_naive"] == p["bound_flash"] == "memory"


def test_prediction_compute_bound_is_one():
    ceilings = {"peak_flops_per_s": 1.0, "bandwidth_bytes_per_s": 1e12}
    assert roofline_model.predict_speedup(ceilings)["predicted_speedup"] == 1.0


def test_bad_repeats():
    with pytest.raises(ValueError, match="repeats"):
        roofline.measure_ceilings(repeats=0)


def test_reference_timings_are_positive_and_consistent():
    t = roofline.time_references(256, 32, 64, 64, repeats=1)
    for scheme in ("naive", "flash"):
        assert t[scheme]["median_s"] > 0
        assert t[scheme]["achieved_flops_per_s"] == pytest.approx(4 * 256 * 256 * 32 / t[scheme]["median_s"])
    assert t["measured_speedup"] == pytest.approx(t["naive"]["median_s"] / t["flash"]["median_s"])
