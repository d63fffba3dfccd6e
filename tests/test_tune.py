"""tools/tune.py: its candidate sets, the configurations it reads from the command line, its summary."""

import argparse

import pandas as pd
import pytest
import tune

from minimodel.kernel import FwdConfig


def test_candidates_keep_the_causal_band_whole():
    for name in tune.CANDIDATES:
        configs = tune.candidate_configs([name])
        assert configs and all(c.BLOCK_M % c.BLOCK_N == 0 for c in configs)
        assert len(set(configs)) == len(configs)


def test_a_configuration_on_the_command_line_reads_as_the_fwdconfig_it_names():
    assert tune.parse_config("128,128,8,2,TMA,MAXNREG=128") == FwdConfig(128, 128, 8, 2, "tl_tma",
                                                                         MAXNREG=128)
    assert tune.parse_config("64, 64, 4, 3") == FwdConfig(64, 64, 4, 3)
    assert tune.parse_config("128,128,4,2,gluon") == FwdConfig(128, 128, 4, 2, "gluon")


@pytest.mark.parametrize("spec", ["128,128,8", "128,x,8,2", "128,128,8,2,FAST", "128,128,8,2,MAXNREG=lots",
                                  "64,128,4,3", "128,0,4,3", "128,128,8,2,num_warps=4"])
def test_a_configuration_that_is_not_one_is_refused(spec):
    with pytest.raises(argparse.ArgumentTypeError):
        tune.parse_config(spec)


def test_named_sets_and_given_configurations_are_timed_each_once():
    mine = FwdConfig(64, 64, 4, 3)  # also in both named sets
    configs = tune.candidate_configs(["sweep", "small"],
                                     [mine, FwdConfig(128, 128, 8, 2, "tl_tma", MAXNREG=128)])
    assert configs[0] == mine and configs.count(mine) == 1
    assert configs[-1].MAXNREG == 128 and len(configs) == len(set(configs))


def test_the_command_line_is_read_before_it_asks_for_a_gpu(tmp_path, capsys):
    with pytest.raises(SystemExit):  # argparse refuses a malformed configuration
        tune.main(["--out", str(tmp_path), "--config", "128,128,8"])
    assert "BLOCK_M,BLOCK_N,WARPS,STAGES" in capsys.readouterr().err
    if not tune.torch.cuda.is_available():
        assert tune.main(["--out", str(tmp_path), "--config", "128,128,8,2,TMA", "--grid", "lab"]) == 2


def test_summary_picks_the_fastest_config_and_divides_by_the_baselines():
    base = {"d": 64, "causal": False, "N": 1024}
    frame = pd.DataFrame([
        {**base, "impl": "sdpa_cudnn", "tflops": 400.0},
        {**base, "impl": "sdpa_flash", "tflops": 200.0},
        {**base, "impl": "triton", "tflops": 300.0, "BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4,
         "num_stages": 3, "path": "tl", "shipped": True},
        {**base, "impl": "triton", "tflops": 360.0, "BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8,
         "num_stages": 3, "path": "tl_tma", "shipped": False},
    ])
    s = tune.summarize(frame)
    row = s.iloc[0]
    assert row["BLOCK_M"] == 128 and row["vs_cudnn"] == 0.9 and row["vs_fa2"] == 1.8
    assert not row["shipped"]
