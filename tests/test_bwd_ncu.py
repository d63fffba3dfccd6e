"""tools/bwd_ncu.py, Nsight Compute beside the other backwards: what it profiles, without a GPU."""

import bwd_ncu
import pytest

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
    _, calls = bwd_ncu.parse(["--ways", "ws", "tma", "cudnn"])
    assert len(calls) == len(bwd_ncu.POINTS) * 2 * 3
    assert calls[:3] == [(way, bwd_ncu.POINTS[0], False) for way in ("ws", "tma", "cudnn")]
    assert calls[-1] == ("cudnn", bwd_ncu.POINTS[-1], True)


def test_by_default_it_profiles_what_the_policy_runs_beside_fa4_and_cudnn():
    args, calls = bwd_ncu.parse([])
    assert args.ways == ["default", "tma", "fa4", "cudnn"]
    assert calls[0] == ("default", bwd_ncu.POINTS[0], False)


def test_the_child_makes_the_calls_the_parent_asked_for():
    # the parent names the calls by counting the child's markers: both must read the same list
    for argv in (["--ways", "ws", "tma", "--point", "1,32,16384,64", "--point", "16,32,1024,64",
                  "--causal"], ["--ways", "ws", "--not-causal"], ["--ways", "fa4"]):
        args, calls = bwd_ncu.parse(argv)
        assert bwd_ncu.parse(bwd_ncu.child_args(args))[1] == calls
    _, calls = bwd_ncu.parse(["--ways", "tma", "--point", "1,32,16384,64", "--causal"])
    assert calls == [("tma", (1, 32, 16384, 64), True)]


def test_a_malformed_point_is_refused_naming_it(capsys):
    with pytest.raises(SystemExit):
        bwd_ncu.parse(["--point", "1,32,16384"])
    assert "'1,32,16384': expected B,H,N,d" in capsys.readouterr().err
