"""Contenders: the config entry, finding the module, and the child process that runs them.

Every bad contender must give a failed row naming what went wrong, and leave the others alone.
"""

import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, copy_of_tiny_run, copy_project

from minimodel.contenders import ContenderError, file_sha256, load, module_path, parse, registry
from minimodel.contenders.catalog import runs_at
from minimodel.contenders.run import Case, Child
from minimodel.contenders.spec import DEFAULT_TIMEOUT_S
from minimodel.floor import contract
from minimodel.floor.contract import BF16_INTERPRETER_REASON
from minimodel.floor.provenance import configcheck, verify
from minimodel.gpu import correctness
from minimodel.gpu.correctness import Planned
from minimodel.gpu.implementations import Remote

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def sweep(contender, cases, search, backward=()) -> list[dict]:
    """The contender's rows at `cases`, then its backward rows at `backward`, in its child process,
    through the correctness stage's loop over an implementation's cases."""
    planned = {contract.FORWARD: [Planned(c) for c in cases],
               contract.BACKWARD: [Planned(c) for c in backward]}
    return correctness.rows_of(Remote(Child(contender, tuple(search))), planned)

BAD = textwrap.dedent('''
    import time
    import torch

    def raises(q, k, v, causal=False):
        raise RuntimeError("out of ideas")

    def wrong(q, k, v, causal=False):
        return torch.zeros_like(q) + 0.5

    def wrong_shape(q, k, v, causal=False):
        return q[..., :-1]

    def wrong_dtype(q, k, v, causal=False):
        return q.float()

    def nan(q, k, v, causal=False):
        return torch.full_like(q, float("nan"))

    def hangs(q, k, v, causal=False):
        if q.shape[2] > 40:
            time.sleep(600)
        return torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                                is_causal=causal).to(q.dtype)
''')


def cases(ns=(33, 77), dtype="float16"):
    return [Case(1, 2, 2, n, 32, causal, dtype, "cpu", seed=i) for i, n in enumerate(ns)
            for causal in (False, True)]


def test_fn_alone_runs_everywhere_with_the_defaults():
    c = parse("mine", {"fn": "torch_blocked:forward"})
    assert c.devices == ("cuda", "cpu") and c.dtypes == ("float16", "bfloat16")
    assert c.head_dims is None and c.causal == (False, True) and not c.gqa and not c.triton
    assert c.timeout_s == DEFAULT_TIMEOUT_S and c.grids == ("lab", "flashattention")
    assert c.skip_reason("cpu", "bfloat16", 64, True, False, interpreted=True) is None  # plain PyTorch
    assert "grouped-query" in c.skip_reason("cpu", "float16", 64, True, True, interpreted=True)


def test_optional_keys_say_what_it_supports():
    c = parse("k", {"fn": "m:f", "devices": ["cuda"], "dtypes": ["float16"], "head_dims": [64],
                    "causal": [False], "triton": True, "timeout_s": 5})
    assert "cuda, not cpu" in c.skip_reason("cpu", "float16", 64, False, False, False)
    assert "not bfloat16" in c.skip_reason("cuda", "bfloat16", 64, False, False, False)
    assert "not 128" in c.skip_reason("cuda", "float16", 128, False, False, False)
    assert "causal" in c.skip_reason("cuda", "float16", 64, True, False, False)
    t = parse("t", {"fn": "m:f", "triton": True})
    assert t.skip_reason("cpu", "bfloat16", 64, False, False, interpreted=True) == BF16_INTERPRETER_REASON
    assert t.skip_reason("cuda", "bfloat16", 64, False, False, interpreted=False) is None


@pytest.mark.parametrize("entry, words", [
    ({}, "give at least fn"),
    ({"fn": "nocolon"}, "accepted: \"module:function\""),
    ({"fn": "m:f", "dtype": ["float16"]}, "unknown key(s) dtype"),
    ({"fn": "m:f", "dtypes": ["float64"]}, "dtypes is ['float64']; accepted: float16, bfloat16"),
    ({"fn": "m:f", "head_dims": [64.0]}, "head_dims is [64.0]"),
    ({"fn": "m:f", "timeout_s": 0}, "timeout_s is 0"),
    ({"fn": "m:f", "gqa": "yes"}, "gqa is 'yes'"),
    ({"fn": "m:f", "grids": ["fa"]}, "grids is ['fa']; accepted: lab, flashattention"),
    ({"fn": "m:f", "backward": "yes"}, "backward is 'yes'; accepted: true or false"),
])
def test_a_bad_entry_is_one_line_naming_the_contender(entry, words):
    with pytest.raises(ContenderError) as err:
        parse("mine", entry)
    assert str(err.value).startswith("contender 'mine': ") and words in str(err.value)
    assert "\n" not in str(err.value)


def test_a_contender_is_timed_on_the_grids_it_names_only():
    from minimodel.gpu.grids import Point
    from minimodel.gpu.implementations import Remote

    class NotCalled:
        contender = parse("fa_only", {"fn": "m:f", "grids": ["flashattention"]})

        def call(self, *args):
            raise AssertionError("a point off its grids was run")

    reason = Remote(NotCalled()).runs_at(Point("lab", 2, 4, 64, 64, False), "forward")
    assert reason == "fa_only is timed on the flashattention grid only"


def test_the_module_is_found_under_examples_and_hashed_by_its_bytes():
    c = parse("mine", {"fn": "torch_blocked:forward"})
    path = module_path(c, (EXAMPLES,))
    assert path == EXAMPLES / "torch_blocked.py"
    assert file_sha256(path) == hashlib.sha256(path.read_bytes()).hexdigest()
    assert callable(load(c, (EXAMPLES,)))


def test_an_unknown_module_or_function_is_one_line(tmp_path):
    with pytest.raises(ContenderError, match="contender 'x': module 'no_such_module' not found"):
        module_path(parse("x", {"fn": "no_such_module:f"}), (tmp_path,))
    with pytest.raises(ContenderError, match="contender 'y': module 'torch_blocked' .* no function 'fwd'"):
        load(parse("y", {"fn": "torch_blocked:fwd"}), (EXAMPLES,))


def test_a_plain_pytorch_contender_passes_on_the_cpu_bf16_too():
    c = parse("blocked", {"fn": "torch_blocked:forward"})
    rows = sweep(c, cases() + cases((50,), "bfloat16"), (EXAMPLES,))
    assert all(r["passed"] for r in rows), rows
    assert {r["dtype"] for r in rows} == {"float16", "bfloat16"} and all(r["impl"] == "blocked" for r in rows)


@pytest.mark.parametrize("fn, reason", [
    ("raises", "RuntimeError: out of ideas"),
    ("wrong", "above the tolerance"),
    ("wrong_shape", "returned shape (1, 2, 33, 31); expected q's shape (1, 2, 33, 32)"),
    ("wrong_dtype", "returned dtype float32; expected q's dtype float16"),
    ("nan", "returned NaN"),
    ("no_such_function", "has no function 'no_such_function'"),
])
def test_a_bad_contender_gets_failed_rows_with_the_reason(tmp_path, fn, reason):
    (tmp_path / "bad_contenders.py").write_text(BAD)
    c = parse(fn, {"fn": f"bad_contenders:{fn}", "timeout_s": 60})
    rows = sweep(c, cases((33,)), (tmp_path,))
    assert len(rows) == 2 and all(r["passed"] is False and reason in r["reason"] for r in rows), rows


def test_a_hung_point_is_stopped_and_the_next_point_still_runs(tmp_path):
    (tmp_path / "bad_contenders.py").write_text(BAD)
    c = parse("hangs", {"fn": "bad_contenders:hangs", "timeout_s": 4})
    rows = sweep(c, [Case(1, 1, 1, 77, 32, False, "float16", "cpu", 0),
                     Case(1, 1, 1, 33, 32, False, "float16", "cpu", 1)], (tmp_path,))
    assert rows[0]["passed"] is False and "time limit of 4 s" in rows[0]["reason"]
    assert rows[1]["passed"] is True, rows[1]


MINE = textwrap.dedent('''
    contenders:
      blocked: {fn: "torch_blocked:forward"}
      raises: {fn: "bad_contenders:raises"}
      wrong: {fn: "bad_contenders:wrong"}
    gpu:
      correctness:
        contenders: [blocked, raises, wrong]
      bytes:
        contenders: [blocked]
''')


def _snakemake(root, *args):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET")}
    command = [sys.executable, "-m", "snakemake", "--cores", "2", "--configfile", "config/tiny.yaml",
               "config/mine.yaml", *args]
    return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)


@pytest.mark.workflow
def test_three_contenders_through_the_whole_workflow(tiny_run, tmp_path):
    """The whole workflow with three contenders added to the tiny config: a copy of the session's
    finished run, so that what the contenders do not reach (the byte model, the CPU stage) is
    already up to date, and every rule that runs a contender or reads what one made runs again."""
    root = copy_of_tiny_run(tiny_run, tmp_path / "project")
    (root / "config" / "mine.yaml").write_text(MINE)
    (root / "examples" / "bad_contenders.py").write_text(BAD)
    proc = _snakemake(root)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    table = pd.read_csv(root / "results" / contract.CORRECTNESS)
    by = {name: rows for name, rows in table.groupby("impl")}
    assert set(by) == {contract.TRITON, "blocked", "raises", "wrong"}
    assert by["blocked"]["passed"].all() and set(by["blocked"]["dtype"]) == {"float16", "bfloat16"}
    ran = {name: rows[~rows["skipped"].astype(bool)] for name, rows in by.items()}
    assert (~ran["raises"]["passed"].astype(bool)).all()
    assert ran["raises"]["reason"].str.contains("RuntimeError: out of ideas").all()
    assert ran["wrong"]["reason"].str.contains("above the tolerance").all()
    # the grouped-query cases are skipped for contenders without gqa, saying so
    raises = by["raises"]
    grouped = raises[(raises["group"] == contract.GQA_CASES) & (raises["direction"] == contract.FORWARD)]
    assert len(grouped) and grouped["reason"].str.contains("grouped-query").all()
    # a contender without a backward: its backward rows are skipped, saying so
    backward = raises[raises["direction"] == contract.BACKWARD]
    assert len(backward) and backward["reason"].str.contains("raises has no backward").all()
    kernel_rows = by[contract.TRITON]
    assert kernel_rows[~kernel_rows["skipped"].astype(bool)]["passed"].astype(bool).all()
    # each contender module is an input of the rules that run it (every shard), hashed by its bytes
    def shard_inputs(stage_dir):
        made = sorted((root / "results" / "gpu" / stage_dir / "shards").glob("*/manifest.json"))
        assert made
        return [{e["path"]: e["sha256"] for e in json.loads(m.read_text())["inputs"]} for m in made]

    for inputs in shard_inputs("correctness"):
        for name in ("torch_blocked.py", "bad_contenders.py"):
            path = root / "examples" / name
            assert inputs[f"examples/{name}"] == hashlib.sha256(path.read_bytes()).hexdigest()
    for inputs in shard_inputs("timing"):
        assert not any(p.startswith("examples/") for p in inputs)  # it runs none
    for inputs in shard_inputs("bytes"):
        assert [p for p in inputs if p.startswith("examples/")] == ["examples/torch_blocked.py"]
    gpu_bytes = pd.read_csv(root / "results" / contract.GPU_BYTES)  # planned, with no GPU: blocked's too
    forward = gpu_bytes[gpu_bytes["direction"] == contract.FORWARD]  # contenders' bytes: the forward's
    assert (forward["impl"] == "blocked").sum() * 2 == forward["impl"].isin(contract.BYTES_SCHEMES).sum()
    assert (gpu_bytes["impl"] == "blocked").sum() == (forward["impl"] == "blocked").sum()
    assert verify.main([str(root / "results")]) == 0
    # editing a contender re-plans the shards that run it and what reads their outputs (the timing
    # gather takes the sweep's summary; decode_gpu reads the timing's copy bandwidth), nothing else
    module = root / "examples" / "torch_blocked.py"
    module.write_text(module.read_text() + "\n# edited\n")
    dry = _snakemake(root, "-n")
    stats = dry.stdout.split("Job stats:")[1].split("total")[0]
    jobs = {line.split()[0] for line in stats.splitlines()[3:] if line.strip()}
    assert jobs == {"gpu_correctness_shard", "gpu_correctness", "gpu_bytes_shard", "gpu_bytes",
                    "gpu_timing", "decode_gpu", "decode_plots", "plots", "readme",
                    "compare", "verify", "compare_verdict", "all"}, stats


@pytest.mark.workflow
def test_an_unknown_function_stops_the_run_before_any_job(tmp_path):
    root = copy_project(tmp_path, ("mine.yaml", MINE.replace("bad_contenders:wrong", "bad_contenders:nope")))
    (root / "examples" / "bad_contenders.py").write_text(BAD)
    proc = _snakemake(root, "-n")
    assert proc.returncode != 0 and "Job stats" not in proc.stdout
    line = ("contender 'wrong': module 'bad_contenders' "
            f"({(root / 'examples' / 'bad_contenders.py').resolve()}) defines no function 'nope'")
    said = proc.stdout + proc.stderr
    # the project's line alone, last: not inside "WorkflowError in file .../Snakefile, line 62:"
    assert proc.stderr.splitlines()[-1] == line, said[-2000:]
    assert "WorkflowError" not in said and "Snakefile" not in said, said[-2000:]


@pytest.mark.workflow
def test_a_syntax_error_in_a_contenders_helper_stops_the_run_in_one_line(tmp_path):
    """As one in the contender's own module: the file and line, last on stderr, no traceback (it
    was "ContenderError in file .../common.smk" and six `File` lines)."""
    mine = MINE.replace("bad_contenders:wrong", "wraps_helper:forward")
    root = copy_project(tmp_path, ("mine.yaml", mine))
    (root / "examples" / "bad_contenders.py").write_text(BAD)
    (root / "examples" / "wraps_helper.py").write_text("from my_broken_helper import SCALE\n\n"
                                                       "def forward(q, k, v, causal=False):\n"
                                                       "    return q * SCALE\n")
    helper = root / "examples" / "my_broken_helper.py"
    helper.write_text("import math\nSCALE = math.sqrt(2\n")
    proc = _snakemake(root, "-n")
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Job stats" not in proc.stdout
    last = proc.stderr.splitlines()[-1]
    assert last.startswith(f"{helper.resolve()}, line 2: not valid Python"), said[-2000:]
    assert "Traceback" not in said and 'File "' not in said and "common.smk" not in said, said[-2000:]


def _config(contenders, correctness=(), timing=(), measured=()):
    return {"contenders": contenders, "gpu": {"correctness": {"contenders": list(correctness)},
                                              "timing": {"contenders": list(timing)},
                                              "bytes": {"contenders": list(measured)}}}


def test_the_registry_refuses_in_one_line_before_any_job(tmp_path, monkeypatch):
    from minimodel.contenders import registry

    monkeypatch.setattr(registry, "SEARCH", (tmp_path, EXAMPLES))
    (tmp_path / "broken.py").write_text("def forward(q, k, v, causal=False)\n    return q\n")
    cases = [
        (_config({"triton": {"fn": "torch_blocked:forward"}}), "contender 'triton': the name is taken"),
        (_config({"flash": {"fn": "torch_blocked:forward"}}), "the project's rows: naive, flash)"),
        (_config({}, correctness=["nobody"]), "contender 'nobody' (gpu.correctness.contenders) is neither"),
        (_config({"b": {"fn": "broken:forward"}}, timing=["b"]), "broken.py, line 1: not valid Python"),
        (_config({"b": {"fn": "torch_blocked:nope"}}, timing=["b"]), "defines no function 'nope'"),
    ]
    for config, words in cases:
        with pytest.raises(ContenderError) as err:
            registry.check(config)
        assert words in str(err.value) and "\n" not in str(err.value)
    ok = _config({"b": {"fn": "torch_blocked:forward"}}, correctness=["b", "naive"], timing=["flex"])
    registry.check(ok)
    assert [c.name for c in registry.selected(ok, "correctness")] == ["b", "naive"]
    assert registry.user_modules(ok, "correctness") == [EXAMPLES / "torch_blocked.py"]
    assert registry.user_modules(ok, "timing") == []  # built-ins are the project's code


def test_every_builtin_names_a_function_of_its_own_name():
    from minimodel.contenders import builtin, catalog

    for name, contender in catalog.BUILTINS.items():
        assert contender.fn == f"minimodel.contenders.builtin:{name}" and callable(getattr(builtin, name))


def test_a_function_bound_under_try_or_if_is_found(tmp_path, monkeypatch):
    from minimodel.contenders import registry

    monkeypatch.setattr(registry, "SEARCH", (tmp_path,))
    (tmp_path / "guarded.py").write_text(
        "try:\n    from torch_blocked_missing import forward\nexcept ImportError:\n"
        "    def forward(q, k, v, causal=False):\n        return q\nif True:\n    other = forward\n")
    for fn in ("guarded:forward", "guarded:other"):
        registry.check(_config({"g": {"fn": fn}}, correctness=["g"]))


def test_a_stage_refuses_a_builtin_it_runs_anyway():
    from minimodel.contenders import registry

    with pytest.raises(ContenderError, match="the stage runs it already"):
        registry.selected(_config({}, timing=["sdpa_cudnn"]), "timing")
    with pytest.raises(ContenderError, match="the stage runs it already"):
        registry.selected(_config({}, correctness=["triton"]), "correctness")
    with pytest.raises(ContenderError, match=r"'naive' \(gpu.bytes.contenders\): the stage runs it"):
        registry.selected(_config({}, measured=["naive"]), "bytes")
    assert [c.name for c in registry.selected(_config({}, measured=["flex"]), "bytes")] == ["flex"]
    assert [c.name for c in registry.selected(_config({}, timing=["triton_tl", "flex"]), "timing")] == [
        "triton_tl", "flex"]


def test_a_module_that_fails_to_load_is_not_loaded_again(tmp_path):
    from minimodel.contenders.run import Child

    (tmp_path / "fails.py").write_text("raise RuntimeError('no')\n"
                                       "def f(q, k, v, causal=False):\n    return q\n")
    c = parse("fails", {"fn": "fails:f"})
    with Child(c, (tmp_path,)) as child:
        first = child.call("output", cases((33,))[0])
        assert child.process is None and "RuntimeError: no" in first[1]
        assert child.call("output", cases((33,))[1]) == first and child.process is None


def test_a_dotted_module_is_found_without_running_its_packages(tmp_path, monkeypatch):
    from minimodel.contenders import registry

    package = tmp_path / "mykernels" / "attn"
    package.mkdir(parents=True)
    marker = tmp_path / "ran"
    for init in (package.parent / "__init__.py", package / "__init__.py"):
        init.write_text(f"open({str(marker)!r}, 'a').write('x')\n")
    (package / "fast.py").write_text("def forward(q, k, v, causal=False):\n    return q\n")
    monkeypatch.setattr(registry, "SEARCH", (tmp_path,))
    config = _config({"mine": {"fn": "mykernels.attn.fast:forward"}}, timing=["mine"])
    registry.check(config)
    # the files Python runs to import it, each package's __init__ first: all inputs of the rule
    assert registry.user_modules(config, "timing") == sorted(
        [package.parent / "__init__.py", package / "__init__.py", package / "fast.py"])
    assert not marker.exists()  # no __init__ ran in this process
    with pytest.raises(ContenderError, match="module 'mykernels.attn.slow' not found"):
        registry.check(_config({"mine": {"fn": "mykernels.attn.slow:forward"}}, timing=["mine"]))
    with pytest.raises(ContenderError, match="module 'mykernels.attn.fast.deeper' not found"):
        registry.check(_config({"mine": {"fn": "mykernels.attn.fast.deeper:forward"}}, timing=["mine"]))
    assert not marker.exists()


def test_every_file_a_contender_imports_is_an_input_and_its_packages_are_recorded(tmp_path, monkeypatch):
    """wrap.py, named in fn, imports a helper in a folder of its own on the path: editing the
    helper must re-run the rules as editing wrap.py does. Installed packages are named with their
    versions; the standard library is neither."""
    import torch

    from minimodel.contenders import registry

    user, lib = tmp_path / "user", tmp_path / "lib"
    (lib / "helpers").mkdir(parents=True)
    user.mkdir()
    (user / "wrap.py").write_text("import json\nimport torch\nfrom my_attn import plain\n\n"
                                  "def forward(q, k, v, causal=False):\n"
                                  "    from helpers.scale import SCALE  # inside a function too\n"
                                  "    return plain(q, k, v, causal)\n")
    (lib / "my_attn.py").write_text("import os.path\nimport torch.nn.functional as F\n"
                                    "try:\n    import not_installed_anywhere\nexcept ImportError:\n"
                                    "    pass\n\ndef plain(q, k, v, causal):\n"
                                    "    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)\n")
    (lib / "helpers" / "__init__.py").write_text("")
    (lib / "helpers" / "scale.py").write_text("from .constants import SCALE\n")
    (lib / "helpers" / "constants.py").write_text("SCALE = 1.0\n")
    monkeypatch.syspath_prepend(str(lib))
    monkeypatch.setattr(registry, "SEARCH", (user,))
    config = _config({"w": {"fn": "wrap:forward"}}, correctness=["w"], timing=["w", "flex"])
    registry.check(config)
    helpers = [lib / "helpers" / name for name in ("__init__.py", "scale.py", "constants.py")]
    expected = sorted(p.resolve() for p in (user / "wrap.py", lib / "my_attn.py", *helpers))
    assert registry.user_modules(config, "correctness") == expected
    assert registry.user_modules(config, "timing") == expected  # the built-in flex adds nothing
    assert registry.user_modules(config, "bytes") == []
    assert registry.user_packages(config, "correctness") == {"torch": torch.__version__}
    (lib / "helpers" / "constants.py").write_text("SCALE = (\n")
    with pytest.raises(ContenderError, match=r"constants.py, line 1: not valid Python"):
        registry.user_modules(config, "correctness")
    # before any job, as the module's own syntax error: one line naming the helper's file and line
    with pytest.raises(ContenderError) as err:
        registry.check(config)
    assert str(err.value).startswith(f"{(lib / 'helpers' / 'constants.py').resolve()}, line 1: not valid")
    assert "\n" not in str(err.value)


def test_an_error_on_importing_a_contenders_helper_is_one_line_naming_the_helpers_line(tmp_path):
    """Imported in the child: a helper that imports what is missing, or raises, names its own line
    (not the import machinery's, nor the project's)."""
    (tmp_path / "wrap_import_error.py").write_text("import torch\nimport helper_import_error\n\n"
                                                   "def f(q, k, v, causal=False):\n    return q\n")
    helper = tmp_path / "helper_import_error.py"
    for source, said in (("import os\nfrom json import no_such_name\n", "ImportError: cannot import name"),
                         ("\n\nraise RuntimeError('no')\n", "RuntimeError: no")):
        helper.write_text(source)
        for name in ("wrap_import_error", "helper_import_error"):
            sys.modules.pop(name, None)
        with pytest.raises(ContenderError) as err:
            load(parse("w", {"fn": "wrap_import_error:f"}), (tmp_path,))
        line = 2 if "json" in source else 3
        assert str(err.value).startswith(f"{helper}, line {line}: {said}"), err.value
        assert "\n" not in str(err.value)


CHATTY = textwrap.dedent('''
    import subprocess
    import sys

    import torch

    def forward(q, k, v, causal=False):
        for i in range(2000):
            print(f"chatty line {i}")
        print("chatty on stderr", file=sys.stderr)
        subprocess.run([sys.executable, "-c", "print('chatty grandchild')"], check=True)
        return torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                                is_causal=causal).to(q.dtype)

    def wrong(q, k, v, causal=False):
        print("wrong was called")
        return torch.zeros_like(q) + 0.5
''')


def test_a_chatty_contenders_output_is_in_the_rules_log_and_not_on_the_console(tmp_path, monkeypatch,
                                                                                capfd):
    """Every line a contender, its stderr and its own child processes print goes to the rule's
    log, untruncated; the console gets one line per contender that failed, naming that log."""
    import io

    from minimodel.contenders.registry import SEARCH
    from minimodel.floor.provenance.configcheck import load_config
    from minimodel.floor.provenance.project import RULE_LOG_ENV

    (tmp_path / "chatty.py").write_text(CHATTY)
    monkeypatch.setattr("minimodel.contenders.registry.SEARCH", (tmp_path, *SEARCH))
    log = tmp_path / "logs" / "gpu_correctness.log"
    log.parent.mkdir()
    monkeypatch.setenv(RULE_LOG_ENV, str(log))
    cfg = load_config(EXAMPLES.parent / "config" / "config.yaml",
                      EXAMPLES.parent / "tests" / "data" / "tiny_config.yaml")["gpu"]["correctness"]
    console = io.StringIO()
    contenders = [parse("chatty", {"fn": "chatty:forward"}), parse("wrong", {"fn": "chatty:wrong"})]
    planned = correctness.plan(cfg, "interpreter", 0)
    rows = correctness.contender_rows(contenders, planned, 0, progress=console)
    ran = sum(r["impl"] == "chatty" and not r["skipped"] for r in rows)
    assert ran > 0 and all(r["passed"] for r in rows if r["impl"] == "chatty" and not r["skipped"])
    text = log.read_text()
    assert text.count("chatty line 1999\n") == ran and text.count("chatty line ") == 2000 * ran
    assert text.count("chatty on stderr") == ran and text.count("chatty grandchild") == ran
    assert "wrong was called" in text
    seen = capfd.readouterr()
    assert "chatty" not in seen.out + seen.err and "wrong was called" not in seen.out + seen.err
    failed = [line for line in console.getvalue().splitlines() if line.startswith("contender ")]
    first = next(r["reason"] for r in rows if r["impl"] == "wrong")
    assert "above the tolerance" in first
    assert failed == [f"contender wrong: {ran} of {ran} cases failed (first: {first}); "
                      f"its output is in {log}"], console.getvalue()


def test_a_misspelled_contender_in_a_stage_list_gets_the_closest_name():
    from minimodel.contenders import registry

    config = _config({"blocked": {"fn": "torch_blocked:forward"}}, correctness=["blokced"])
    with pytest.raises(ContenderError) as err:
        registry.selected(config, "correctness")
    assert str(err.value).endswith("nor under contenders: (blocked); did you mean 'blocked'?")
    with pytest.raises(ContenderError, match=r"did you mean 'flex'\?"):
        registry.selected(_config({}, timing=["flexx"]), "timing")
    with pytest.raises(ContenderError) as err:  # not one the stage runs anyway: that is refused too
        registry.selected(_config({}, timing=["sdpa_flassh"]), "timing")
    assert "did you mean" not in str(err.value)


@pytest.mark.parametrize("source, says", [
    ("def plain(q, k, v):\n    return q\n", "plain() has no causal parameter"),
    ("def plain(q, k, causal=False):\n    return q\n", "plain() takes causal as parameter 3, where q, k, v"),
    ("def plain(q, k):\n    return q\n", "plain() takes 2 positional parameter(s) (q, k), not q, k, v"),
    ("def plain(q, k, v, scale, causal=False):\n    return q\n", "plain() requires scale"),
    ("def plain(q, k, v, *, causal, block):\n    return q\n", "plain() requires block"),
])
def test_a_function_that_cannot_take_causal_is_refused_naming_its_file_and_line(tmp_path, monkeypatch,
                                                                                 source, says):
    from minimodel.contenders import registry

    monkeypatch.setattr(registry, "SEARCH", (tmp_path,))
    (tmp_path / "my_attn.py").write_text("import torch\n\n\n" + source)
    with pytest.raises(ContenderError) as err:
        registry.check(_config({"mine": {"fn": "my_attn:plain"}}, correctness=["mine"]))
    assert str(err.value).startswith(f"{tmp_path / 'my_attn.py'}, line 4: contender 'mine': {says}")
    assert "called as plain(q, k, v, causal=...)" in str(err.value)


@pytest.mark.parametrize("source", [
    "def plain(q, k, v, causal=False):\n    return q\n",
    "def plain(q, k, v, *, causal):\n    return q\n",
    "def plain(*args, **kwargs):\n    return args[0]\n",
    "import functools\n@functools.lru_cache\ndef plain(x):\n    return x\n",  # decorated: not judged
    "def plain(q):\n    return q\ntry:\n    from fast import plain\nexcept ImportError:\n    pass\n",
])
def test_a_function_that_takes_causal_or_cannot_be_judged_is_accepted(tmp_path, monkeypatch, source):
    from minimodel.contenders import registry

    monkeypatch.setattr(registry, "SEARCH", (tmp_path,))
    (tmp_path / "my_attn.py").write_text(source)
    registry.check(_config({"mine": {"fn": "my_attn:plain"}}, correctness=["mine"]))


def test_fn_without_a_colon_says_module_function():
    from minimodel.floor.provenance.configcheck import ConfigError, check_config, load_config

    config = load_config(EXAMPLES.parent / "config" / "config.yaml")
    config["contenders"] = {"mine": {"fn": "my_attn.plain"}}
    with pytest.raises(ConfigError) as err:
        check_config(config)
    assert str(err.value).startswith("config: contenders.mine.fn is 'my_attn.plain'; accepted: "
                                     '"module:function"'), str(err.value)


# ---- a contender's backward (`backward: true`): dQ, dK, dV by autograd in its child ------------

BACKWARDS = textwrap.dedent('''
    import torch
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    def right(q, k, v, causal=False):
        return sdpa(q.float(), k.float(), v.float(), is_causal=causal).to(q.dtype)

    def detached(q, k, v, causal=False):
        return right(q, k, v, causal).detach()

    def scaled_gradient(q, k, v, causal=False):  # the right output, its gradient 1.5 times too big
        out = right(q, k, v, causal)
        return out.detach() + 1.5 * (out - out.detach())
''')


def backward_sweep(tmp_path, fn, **entry):
    (tmp_path / "backwards.py").write_text(BACKWARDS)
    c = parse(fn, {"fn": f"backwards:{fn}", **entry})
    rows = sweep(c, cases((33,)), (tmp_path,), backward=cases((33, 70)))
    forward = [r for r in rows if r["direction"] == contract.FORWARD]
    backward = [r for r in rows if r["direction"] == contract.BACKWARD]
    assert len(forward) == 2 and len(backward) == 4 and all(r["passed"] for r in forward), forward
    return backward


def test_a_contender_with_a_backward_gets_backward_rows_that_pass(tmp_path):
    rows = backward_sweep(tmp_path, "right", backward=True)
    assert all(r["passed"] and not r["skipped"] for r in rows), rows
    for r in rows:
        assert all(0 < r[f"err_{g}_kernel_vs_fp64"] <= r[f"tolerance_{g}"] for g in ("dq", "dk", "dv"))


def test_the_examples_blocked_contender_and_naive_pass_the_backward():
    from minimodel.contenders.catalog import BUILTINS

    for c in (parse("blocked", {"fn": "torch_blocked:forward", "backward": True}), BUILTINS["naive"]):
        rows = sweep(c, [], (EXAMPLES,), backward=cases((40,)))
        assert len(rows) == 2 and all(r["passed"] and r["direction"] == "backward" for r in rows), rows


def test_a_contender_without_a_backward_gets_skipped_rows_saying_so(tmp_path):
    rows = backward_sweep(tmp_path, "right")
    assert all(r["skipped"] and r["passed"] is None for r in rows)
    assert {r["reason"] for r in rows} == {"right has no backward (backward: true in its entry gives it one)"}


@pytest.mark.parametrize("fn, reason", [
    ("detached", "its output does not require grad"),
    ("scaled_gradient", "above the tolerance"),
])
def test_a_wrong_backward_fails_the_backward_rows(tmp_path, fn, reason):
    rows = backward_sweep(tmp_path, fn, backward=True)
    assert all(r["passed"] is False for r in rows) and all(reason in r["reason"] for r in rows), rows


def test_the_builtins_are_listed_in_the_docs_alone():
    """docs/contenders.md describes every built-in a stage's list may name (the SDPA backends
    together); the config and the other docs point there, and type none of their names (but
    naive's, which is also the word for the reference)."""
    from minimodel.contenders.catalog import BUILTINS

    listable = set(BUILTINS) - {contract.TRITON, *contract.SDPA_BACKENDS}
    docs = (EXAMPLES.parent / "docs" / "contenders.md").read_text()
    assert {name for name in listable if f"`{name}`" in docs} == listable
    elsewhere = [EXAMPLES.parent / "config" / "config.yaml",
                 EXAMPLES.parent / "docs" / "contenders-inputs.md"]
    names = (listable - {contract.NAIVE}) | set(contract.SDPA_BACKENDS)
    named = {(path.name, name) for path in elsewhere for name in names
             if re.search(rf"\b{name}\b", path.read_text())}
    assert named == set()


def test_the_builtins_say_which_have_a_backward():
    from minimodel.contenders.catalog import BUILTINS, Where

    assert [n for n, c in BUILTINS.items() if not c.backward] == [contract.TRITON_TL]
    where = Where(64, False)
    assert "triton_tl has no backward" in runs_at(BUILTINS[contract.TRITON_TL], where, contract.BACKWARD)
    assert runs_at(BUILTINS[contract.TRITON_TL], where, contract.FORWARD) is None
    assert runs_at(BUILTINS[contract.NAIVE], where, contract.BACKWARD) is None


def test_flex_is_compiled_so_that_its_backward_can_be_replayed():
    # the backward's timing replays one forward's graph (retain_graph=True): a compiled backward
    # with donated buffers refuses that (on the H200, 26 of flex's 28 backward points failed so)
    import torch._functorch.config as functorch_config

    from minimodel.contenders import builtin

    builtin._flex()
    assert functorch_config.donated_buffer is False


@pytest.mark.parametrize("stage", registry.STAGES)
def test_a_rules_contender_parameters_give_back_the_contenders_the_config_selects(stage):
    """What a GPU rule's script runs comes from its own `params.contenders`: the config's selection,
    the example contenders' own entries and the built-ins by name."""
    config = configcheck.load_config(ROOT / "examples" / "contenders.yaml")
    entries = registry.entries(config, stage)
    assert list(entries) == config["gpu"][stage]["contenders"]
    assert registry.from_params(entries) == registry.selected(config, stage)
    assert {name for name, entry in entries.items() if entry == registry.BUILT_IN} == {
        name for name in entries if name not in config["contenders"]}


@pytest.mark.parametrize("causal", [False, True])
def test_flex_makes_its_block_mask_once_and_matches_float64(causal):
    """flex (`builtin.flex`, run here on the CPU's compiled code): a block mask per (N, device,
    causal) made once, outside later calls (without one, flex_attention makes an empty one inside
    every call), and the output against float64 at a ragged N."""
    import torch

    from minimodel.contenders import builtin
    from minimodel.floor.attention_ref import reference_attn

    gen = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(1, 2, 200, 32, generator=gen) for _ in range(3))
    builtin._block_mask.cache_clear()
    first = builtin.flex(q, k, v, causal)
    again = builtin.flex(q, k, v, causal)
    assert builtin._block_mask.cache_info().misses == 1 and builtin._block_mask.cache_info().hits == 1
    assert torch.equal(first, again)
    expected = reference_attn(q.double(), k.double(), v.double(), causal=causal)
    assert (first.double() - expected).abs().max().item() < 1e-5
