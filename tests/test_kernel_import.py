"""Compiled or interpreted: decided once, at process entry, by importing `minimodel.entry`.

Each check runs in a fresh Python: Triton decides once per process, when the kernel is defined.
"""

import json
import os
import subprocess
import sys

import pytest
from conftest import HAS_CUDA

ENTRY = "import minimodel.entry\n"


def fresh_python(code: str, **env: str) -> dict:
    """Run `code` in a new interpreter without the test session's TRITON_INTERPRET; its last line
    of stdout, read as JSON."""
    base = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


STATE = "import json, os, sys; print(json.dumps({'env': os.environ.get('TRITON_INTERPRET'), " \
        "'triton': 'triton' in sys.modules, 'flash': 'minimodel.kernel.flash' in sys.modules}))"


def test_importing_the_package_and_its_stages_sets_nothing():
    state = fresh_python("import minimodel, minimodel.gpu, minimodel.contenders.registry\n" + STATE)
    assert state == {"env": None, "triton": False, "flash": False}


def test_the_entry_turns_the_interpreter_on_exactly_when_there_is_no_gpu():
    state = fresh_python(ENTRY + "from minimodel.kernel import INTERPRETED\n"
                         "import json; print(json.dumps({'interpreted': INTERPRETED}))")
    assert state == {"interpreted": not HAS_CUDA}


def test_the_entry_defines_no_kernel():
    state = fresh_python(ENTRY + STATE)
    assert state == {"env": None if HAS_CUDA else "1", "triton": False, "flash": False}


def test_the_entry_leaves_a_users_choice_alone():
    state = fresh_python(ENTRY + STATE, TRITON_INTERPRET="0")
    assert state["env"] == "0"


@pytest.mark.skipif(HAS_CUDA, reason="with CUDA the entry has nothing to decide")
def test_an_entry_after_the_kernel_was_defined_is_an_error():
    state = fresh_python(
        "import minimodel.kernel\n"
        "try:\n    import minimodel.entry\n    raised = False\n"
        "except RuntimeError:\n    raised = True\n"
        "import json; print(json.dumps({'raised': raised}))")
    assert state == {"raised": True}


@pytest.mark.skipif(HAS_CUDA, reason="the interpreter on CPU tensors")
def test_under_triton_interpret_the_package_runs_the_kernel_on_cpu_tensors():
    state = fresh_python(
        ENTRY + "import torch\nfrom minimodel.kernel import flash_attn_forward\n"
        "q = torch.randn(1, 1, 16, 16, dtype=torch.float16)\n"
        "o = flash_attn_forward(q, q, q, causal=True)\n"
        "ref = torch.nn.functional.scaled_dot_product_attention(q.float(), q.float(), q.float(), "
        "is_causal=True)\n"
        "import json; print(json.dumps({'err': (o.float() - ref).abs().max().item()}))")
    assert state["err"] < 1e-2
