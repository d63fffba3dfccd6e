"""The committed H200 reference against today's policy: at every point of its timing table the
policy picks the configuration the reference ran, and a row records the same `path` ("tl" or
"gluon", the kernel's language; the variant is in the `cfg_*` columns), so a new run's tables pair
with the reference's and the README's headline, which groups by `path`, says what it said."""

from pathlib import Path

import pandas as pd
import pytest

from minimodel.floor import contract
from minimodel.kernel import policy
from minimodel.report import headline

REF = Path(__file__).resolve().parents[1] / "results" / "reference" / "nvidia-h200"
SMS = 132  # the H200's

pytestmark = pytest.mark.skipif(not (REF / contract.TIMING).exists(), reason="no reference run committed")


@pytest.fixture(autouse=True)
def compiled(monkeypatch):
    """The policy as a compiled run on the H200 sees it (these tests run under the interpreter)."""
    monkeypatch.setattr(policy, "INTERPRETED", False)


def _kernel_rows() -> pd.DataFrame:
    t = pd.read_csv(REF / contract.TIMING)
    t = t[(t["impl"] == contract.TRITON) & (t["status"] == contract.OK)]
    return t[t["direction"].isin([contract.FORWARD, contract.BACKWARD])]


def _configs(r) -> tuple:
    """(forward, backward) configurations today's policy picks at the point of row `r`."""
    d, n, causal, heads = int(r.d), int(r.N), bool(r.causal), int(r.B * r.H)
    return (policy.get_fwd_config(d, causal, "cuda", n, heads, SMS, policy.HOPPER),
            policy.get_bwd_config(d, causal, "cuda", policy.HOPPER, n=n, heads=heads, sms=SMS))


def test_every_kernel_row_of_the_reference_is_what_the_policy_picks_and_records_its_path():
    rows = _kernel_rows()
    assert len(rows) >= 50 and set(rows["path"]) == {"tl", "gluon"}
    tma_paths = 0
    for r in rows.itertuples():
        fwd, bwd = _configs(r)
        if r.direction == contract.FORWARD:
            assert (fwd.language, fwd.TMA, fwd.BLOCK_M, fwd.BLOCK_N, fwd.num_warps, fwd.num_stages) == (
                r.path, bool(r.cfg_TMA), r.cfg_BLOCK_M, r.cfg_BLOCK_N, r.cfg_num_warps, r.cfg_num_stages), r
            tma_paths += fwd.path == "tl_tma"
        else:
            ran = (r.path, r.forward_path, bool(r.cfg_GLUON_DQ), r.cfg_BLOCK_M1, r.cfg_BLOCK_N1,
                   r.cfg_BLOCK_M2, r.cfg_BLOCK_N2, r.cfg_num_warps_kv, r.cfg_num_warps_q)
            assert (bwd.language, fwd.language, bwd.dq == "gluon_pass", bwd.BLOCK_M1, bwd.BLOCK_N1,
                    bwd.BLOCK_M2, bwd.BLOCK_N2, bwd.num_warps_kv, bwd.num_warps_q) == ran, r
            assert (bwd.dkdv == "gluon_ws") == (r.path == "gluon") and bwd.deterministic
    assert tma_paths  # rows whose `path` "tl" is the flag "tl_tma": recording the flag would not pair


def test_the_headline_of_a_run_recording_today_s_paths_is_the_reference_s():
    """The kernel's speed by path over the closest implementation: the reference's rows, their
    `path` as today's configurations record it, give the same text."""
    t = pd.read_csv(REF / contract.TIMING)
    today = t.copy()
    for i, r in _kernel_rows().iterrows():
        fwd, bwd = _configs(r)
        today.loc[i, "path"] = fwd.language if r["direction"] == contract.FORWARD else bwd.language
    forward = contract.forward_rows(t)
    said = headline.speed_rows(forward)
    assert any(" path (d = " in text for _, text in said)
    assert headline.speed_rows(contract.forward_rows(today)) == said
    flags = today.copy()  # the flag instead: the headline would name another path
    flags.loc[(flags["path"] == "tl") & (flags["cfg_TMA"] == True), "path"] = "tl_tma"  # noqa: E712
    assert headline.speed_rows(contract.forward_rows(flags)) != said
