"""tools/tune.py: its candidate sets and its summary."""

import pandas as pd
import tune


def test_candidates_keep_the_causal_band_whole():
    rounds = [tune.candidate_configs(r) for r in (1, 2, 3)]
    rounds += [tune.candidate_configs(11, d) for d in (64, 128)]
    for configs in rounds:
        assert configs and all(c.BLOCK_M % c.BLOCK_N == 0 for c in configs)
        assert len(set(configs)) == len(configs)


def test_summary_picks_the_fastest_config_and_divides_by_the_baselines():
    base = {"d": 64, "causal": False, "N": 1024}
    frame = pd.DataFrame([
        {**base, "impl": "sdpa_cudnn", "tflops": 400.0},
        {**base, "impl": "sdpa_flash", "tflops": 200.0},
        {**base, "impl": "triton", "tflops": 300.0, "BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4,
         "num_stages": 3, "TMA": False},
        {**base, "impl": "triton", "tflops": 360.0, "BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8,
         "num_stages": 3, "TMA": True},
    ])
    s = tune.summarize(frame)
    row = s.iloc[0]
    assert row["BLOCK_M"] == 128 and row["vs_cudnn"] == 0.9 and row["vs_fa2"] == 1.8
