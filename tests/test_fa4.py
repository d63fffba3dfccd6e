"""FlashAttention-4 as a built-in contender, and a contender declining a point it does not support.

The CPU suite has no FA4: a stand-in package with FA4's layout and FA4's way of refusing (an
assert) takes its place, the way `pip install flash-attn-4` lays it out (`flash_attn` a namespace
holding only `flash_attn.cute`).
"""

import importlib.util
import sys
import textwrap

import pytest
import torch
from test_contenders import sweep

from minimodel.contenders import builtin, catalog
from minimodel.contenders.run import Case
from minimodel.contenders.spec import Contender, ContenderError, parse
from minimodel.contenders.timed import TimingCase
from minimodel.floor import contract
from minimodel.gpu import timing_rows
from minimodel.gpu.implementations import Remote

STAND_IN = textwrap.dedent('''
    import torch

    def flash_attn_func(q, k, v, causal=False):
        # (B, N, H, d) in and out, like FA4; returns (out, lse)
        assert q.shape[-1] % 8 == 0, f"head_dim={q.shape[-1]} is not supported: divisible by 8"
        t = lambda x: x.transpose(1, 2).float()
        out = torch.nn.functional.scaled_dot_product_attention(t(q), t(k), t(v), is_causal=causal)
        return out.to(q.dtype).transpose(1, 2).contiguous(), None
''')


@pytest.fixture
def fa4_namespace(tmp_path, monkeypatch):
    """FA4's layout on sys.path: `flash_attn/` without an `__init__`, and `flash_attn/cute/`."""
    (tmp_path / "flash_attn" / "cute").mkdir(parents=True)
    (tmp_path / "flash_attn" / "cute" / "__init__.py").write_text(STAND_IN)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in _flash_attn_modules():
        monkeypatch.delitem(sys.modules, name)
    builtin._fa4.cache_clear()
    yield tmp_path
    builtin._fa4.cache_clear()
    for name in _flash_attn_modules():  # the stand-in's, imported by the test
        del sys.modules[name]


def _flash_attn_modules():
    return [m for m in sys.modules if m == "flash_attn" or m.startswith("flash_attn.")]


def test_fa4_namespace_is_not_flashattention_2(fa4_namespace):
    assert "FlashAttention-2" in catalog.unavailable(contract.FLASH_ATTN)
    assert catalog.unavailable(contract.FA4) is None or not torch.cuda.is_available()


def test_fa4_not_installed_is_said():
    if importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("a flash_attn package is installed here")
    assert "flash-attn-4" in catalog.unavailable(contract.FA4)
    assert "not installed" in catalog.unavailable(contract.FLASH_ATTN)


def test_fa4_takes_the_stage_layout_as_views_and_declines_what_it_refuses(fa4_namespace):
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, 3, 37, 16, generator=gen) for _ in "qkv")
    for causal in (False, True):
        out = builtin.fa4(q, k, v, causal=causal)
        exact = builtin.naive(q.double(), k.double(), v.double(), causal=causal)
        assert out.shape == q.shape and (out.double() - exact).abs().max() < 1e-5
    with pytest.raises(NotImplementedError, match="FA4 refuses this case: head_dim=12"):
        builtin.fa4(*(torch.randn(1, 1, 8, 12) for _ in "qkv"))


def test_fa4_keeps_its_compiled_kernels_on_disk_unless_told_not_to(fa4_namespace, monkeypatch):
    """FA4 reads FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED when `flash_attn.cute` is imported: the
    contender sets it first, and leaves a value the user set alone."""
    cute = fa4_namespace / "flash_attn" / "cute" / "__init__.py"
    cute.write_text(f"{STAND_IN}\nimport os\nCACHE = os.environ.get({builtin.FA4_CACHE_VARIABLE!r})\n")
    for user, seen in ((None, "1"), ("0", "0")):
        if user is None:
            monkeypatch.delenv(builtin.FA4_CACHE_VARIABLE, raising=False)
        else:
            monkeypatch.setenv(builtin.FA4_CACHE_VARIABLE, user)
        for name in _flash_attn_modules():
            monkeypatch.delitem(sys.modules, name)
        builtin._fa4.cache_clear()
        builtin._fa4()
        assert sys.modules["flash_attn.cute"].CACHE == seen


def test_fa4_runs_only_on_cuda():
    reason = catalog.runs_at(catalog.BUILTINS[contract.FA4], catalog.Where(64, False, device="cpu"),
                             contract.FORWARD)
    assert reason is not None


DECLINING = textwrap.dedent('''
    import torch

    def forward(q, k, v, causal=False):
        if q.shape[-1] == 16:
            raise NotImplementedError("head dim 16 is not in this kernel")
        return torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                                is_causal=causal).to(q.dtype)
''')


def test_a_declined_case_is_a_skipped_row_with_its_reason(tmp_path):
    (tmp_path / "declining.py").write_text(DECLINING)
    c = Contender("declining", "declining:forward")
    cases = [Case(1, 2, 2, 33, d, causal, "float16", "cpu", seed=i)
             for i, (d, causal) in enumerate([(16, False), (32, False), (16, True)])]
    rows = sweep(c, cases, (tmp_path,))
    assert [r["skipped"] for r in rows] == [True, False, True]
    assert all(r["reason"] == "head dim 16 is not in this kernel" and r["passed"] is None
               for r in rows if r["skipped"])
    assert rows[1]["passed"] is True


class _DecliningChild:
    contender = Contender("declining", "declining:forward")

    def call(self, task, payload):
        return "skipped", "no kernel for this shape"


def test_a_declined_timing_point_is_a_skipped_row():
    point = {"grid": contract.LAB_GRID, "B": 1, "H": 1, "N": 64, "d": 64, "causal": False}
    row = timing_rows.empty_row(point, "declining", 1.0)
    with timing_rows.failures_in_status(row):
        Remote(_DecliningChild()).prepare(TimingCase(1, 1, 64, 64, False, 0, 1, 1), "forward", None)
    assert row["status"] == f"{contract.SKIPPED}: no kernel for this shape" and row["ms"] is None


SEQUENCE_FIRST = textwrap.dedent('''
    import torch

    def forward(q, k, v, causal=False):
        # (B, N, H, d), contiguous: what `layout: bnhd` promises
        assert all(x.is_contiguous() for x in (q, k, v)), "not contiguous"
        t = lambda x: x.transpose(1, 2).float()
        out = torch.nn.functional.scaled_dot_product_attention(t(q), t(k), t(v), is_causal=causal)
        return out.transpose(1, 2).to(q.dtype)
''')


def test_a_sequence_first_contender_gets_its_layout_and_passes(tmp_path):
    (tmp_path / "seqfirst.py").write_text(SEQUENCE_FIRST)
    c = parse("seqfirst", {"fn": "seqfirst:forward", "layout": "bnhd"})
    assert c.layout == "bnhd"
    cases = [Case(2, 3, 3, 37, 16, causal, "float16", "cpu", seed=i)
             for i, causal in enumerate((False, True))]
    rows = sweep(c, cases, (tmp_path,))
    assert all(r["passed"] for r in rows), rows
    # the same function given the stage's (B, H, N, d) layout computes attention over the wrong axes
    wrong = sweep(Contender("seqfirst", "seqfirst:forward"), cases, (tmp_path,))
    assert not any(r["passed"] for r in wrong)


@pytest.mark.parametrize("layout", ["nhd", ["bnhd"], 3])
def test_a_bad_layout_is_refused_naming_the_accepted_ones(layout):
    with pytest.raises(ContenderError, match="layout is .*accepted: bhnd, bnhd"):
        parse("x", {"fn": "m:f", "layout": layout})
