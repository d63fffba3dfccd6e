"""tools/bwd_ncu.py, Nsight Compute beside the other backwards: what it profiles, without a GPU."""

import bwd_ncu

from minimodel.gpu import ncu


def test_it_profiles_what_runs_between_profiler_start_and_stop_not_an_nvtx_range():
    # on the H200 the bytes stage's NVTX range profiled none of cuDNN's or FA4's backward kernels:
    # autograd launches them from a thread of its own, and an NVTX range is the caller's thread's
    options = bwd_ncu.PROFILED_OPTIONS
    assert "--nvtx" not in options and "--nvtx-include" not in options
    assert options[options.index("--profile-from-start") + 1] == "off"
    kept = [o for o in ncu.NCU_OPTIONS if not o.startswith("--nvtx") and ncu.NVTX_RANGE not in o]
    assert all(o in options for o in kept)  # the stage's cache and clock settings, kept


def test_the_calls_come_point_by_point_causal_and_not_each_way_in_order():
    calls = bwd_ncu.order(["ws", "ordered", "cudnn"])
    assert len(calls) == len(bwd_ncu.POINTS) * 2 * 3
    assert calls[:3] == [(way, bwd_ncu.POINTS[0], False) for way in ("ws", "ordered", "cudnn")]
    assert calls[-1] == ("cudnn", bwd_ncu.POINTS[-1], True)
