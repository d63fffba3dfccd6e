"""tools/dq_pass_probe.py, the dQ passes side by side: what it reads from the command line, without a GPU."""

import argparse

import dq_pass_probe
import pytest

from minimodel.kernel.gluon_bwd_dqpass import CONSUMERS


def test_tiles_read_as_the_gluon_passs_launch_takes_them():
    assert dq_pass_probe.variant("64,4") == {"block_n": 64, "stages": 4, "consumers": CONSUMERS}
    assert dq_pass_probe.variant("128,3,3") == {"block_n": 128, "stages": 3, "consumers": 3}


@pytest.mark.parametrize("spec", ["64", "64,4,3,2", "64,x"])
def test_tiles_of_the_wrong_shape_are_refused_naming_the_form(spec):
    with pytest.raises(argparse.ArgumentTypeError, match=r"expected BLOCK_N,STAGES\[,CONSUMERS\]"):
        dq_pass_probe.variant(spec)


def test_without_a_cuda_device_it_says_so_and_runs_nothing(monkeypatch, capsys):
    monkeypatch.setattr(dq_pass_probe.torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as stop:
        dq_pass_probe.main(["--tiles", "64,4"])
    assert stop.value.code == 2 and "CUDA device" in capsys.readouterr().err
