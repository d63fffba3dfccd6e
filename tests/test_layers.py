"""The package's layers (ARCHITECTURE.md): a stage reads the files it is given, never another
stage's code. What several stages share lies on one floor below them (`minimodel.floor`), and the
floor imports no stage. Above them all, the entry points, each of which imports `minimodel.entry`
first; the Snakefile's own process never does.
"""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import copy_project

from minimodel.floor.provenance import devices

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "minimodel"

# below every stage, one package: what stages hand each other, and what several of them use
FLOOR = "floor"
# each stage's packages, and the packages of its own stage below it (stage 3: the GPU stage runs the
# contenders, and the contenders run the kernel; nothing runs back up)
STAGES = {"symbolic": set(), "cpu": set(), "gpu": {"contenders", "kernel"}, "contenders": {"kernel"},
          "kernel": set(), "report": set()}
ENTRY_POINTS = {"__main__", "entry"}  # `python -m minimodel`, and what entry points import first


def minimodel_imports(path: Path) -> set[str]:
    """The top-level parts of minimodel (`cpu`, `floor`, ...) a file imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "minimodel":
            parts = node.module.split(".")
            found |= {parts[1]} if len(parts) > 1 else {a.name for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names
                      if a.name.startswith("minimodel.")}
    return found


def layer_of(path: Path) -> str:
    return path.relative_to(SRC).with_suffix("").parts[0]


def crossings() -> list[str]:
    """Every import of a module that its layer may not use, as `importer -> imported`."""
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        layer = layer_of(path)
        if layer in ENTRY_POINTS or layer == "__init__":
            continue
        allowed = {FLOOR} if layer == FLOOR else {FLOOR, layer} | STAGES.get(layer, set())
        bad += [f"{path.relative_to(SRC)} -> minimodel.{name}"
                for name in sorted(minimodel_imports(path) - allowed)]
    return bad


def test_every_part_of_the_package_is_a_stage_the_floor_or_an_entry_point():
    parts = {layer_of(p) for p in SRC.rglob("*.py")} - {"__init__"}
    assert parts <= {FLOOR} | set(STAGES) | ENTRY_POINTS, "a new part: place it in floor/ or STAGES"


def test_no_stage_imports_another_stage_and_the_floor_imports_no_stage():
    assert crossings() == []


def test_the_check_sees_a_crossing(tmp_path, monkeypatch):
    fake = tmp_path / "minimodel"
    for rel, text in {"contenders/run.py": "def f():\n    from minimodel.gpu.bench import bench_ms\n",
                      "gpu/timing.py": "from minimodel.cpu import roofline\n",
                      "floor/timers.py": "import minimodel.gpu.timing\n",
                      "gpu/hbm.py": "from minimodel import kernel, symbolic\n",
                      "cpu/bytecount.py": "from minimodel.floor import contract\n"}.items():
        (fake / rel).parent.mkdir(parents=True, exist_ok=True)
        (fake / rel).write_text(text)
    monkeypatch.setattr(f"{__name__}.SRC", fake)
    assert crossings() == ["contenders/run.py -> minimodel.gpu", "floor/timers.py -> minimodel.gpu",
                           "gpu/hbm.py -> minimodel.symbolic", "gpu/timing.py -> minimodel.cpu"]


# every process that may run the kernel starts in one of these; tools/kernel_report.py,
# tools/bwd_ws_report.py, tools/tma_reduce_probe.py and tools/bwd_bench.py use Triton's real
# compiler (they compile for a GPU they need not have, or time on one), and the reports decide so
# at their entry, `tools/compiled_entry.py`
COMPILED_ENTRY = ROOT / "tools" / "compiled_entry.py"
ENTRY_FILES = sorted([*(ROOT / "scripts").glob("*.py"), *(p for p in (ROOT / "tools").glob("*.py")
                                                          if p != COMPILED_ENTRY),
                      ROOT / "tests" / "conftest.py", SRC / "__main__.py"])
COMPILES_ONLY = (ROOT / "tools" / "kernel_report.py", ROOT / "tools" / "bwd_bench.py",
                 ROOT / "tools" / "bwd_ws_report.py", ROOT / "tools" / "tma_reduce_probe.py",
                 ROOT / "tools" / "kernel_digests.py")


def first_minimodel_import(path: Path, tops=("minimodel",)) -> str | None:
    """The first module a file imports at its top level whose top name is one of `tops`."""
    for node in ast.parse(path.read_text()).body:
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        for name in names:
            if name.split(".")[0] in tops:
                return name
    return None


def test_every_entry_point_imports_the_entry_before_anything_else_of_minimodel():
    wrong = {str(p.relative_to(ROOT)): first_minimodel_import(p) for p in ENTRY_FILES
             if p not in COMPILES_ONLY and first_minimodel_import(p) != "minimodel.entry"}
    assert wrong == {}


def test_the_compiling_tool_takes_the_compiler_at_its_entry():
    # before anything of minimodel, and before tools/tune.py, whose minimodel.entry would choose
    # the interpreter on a machine without a GPU
    tops = ("minimodel", "tune", COMPILED_ENTRY.stem)
    for tool in ("kernel_report.py", "bwd_ws_report.py", "kernel_digests.py"):
        assert first_minimodel_import(ROOT / "tools" / tool, tops) == COMPILED_ENTRY.stem
    assert first_minimodel_import(COMPILED_ENTRY) is None


def test_no_module_of_the_package_imports_the_entry():
    importers = [str(p.relative_to(ROOT)) for p in SRC.rglob("*.py")
                 if p != SRC / "__main__.py" and "entry" in minimodel_imports(p)]
    assert importers == [] and not any("entry" in minimodel_imports(p) for p in COMPILES_ONLY)


SITECUSTOMIZE = """
import atexit, json, os, sys

def _record():
    if "snakemake" in sys.modules and "MINIMODEL_TEST_STATE" in os.environ:
        with open(os.environ["MINIMODEL_TEST_STATE"], "w") as f:
            json.dump({"env": os.environ.get("TRITON_INTERPRET"), "entry": "minimodel.entry" in sys.modules,
                       "kernel": "minimodel.kernel" in sys.modules, "torch": "torch" in sys.modules,
                       "registry": "minimodel.contenders.registry" in sys.modules}, f)

atexit.register(_record)
"""


def test_the_snakefiles_process_decides_nothing_and_imports_no_torch(tmp_path):
    """A TRITON_INTERPRET=1 set in the Snakefile's process, on a CPU submit host, would reach the
    jobs it sends to GPU nodes: the process that reads the workflow never imports minimodel.entry."""
    root = copy_project(tmp_path / "project")
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    state = tmp_path / "state.json"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(PYTHONPATH=str(hook), MINIMODEL_TEST_STATE=str(state))
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--dry-run", "--cores", "1",
                           "--configfile", "config/tiny.yaml"], cwd=root, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert json.loads(state.read_text()) == {"env": None, "entry": False, "kernel": False, "torch": False,
                                             "registry": True}


def local_imports(path: Path, tops=("minimodel", "triton"), root: Path = ROOT) -> list[str]:
    """`file:line` of every import inside a function of a module whose top name is one of `tops`
    (every import inside a function, with `tops` None)."""
    found = []
    for fn in ast.walk(ast.parse(path.read_text())):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(fn):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                             else [node.module or ""])
                    if tops is None or any(n.split(".")[0] in tops for n in names):
                        found.append(f"{path.relative_to(root)}:{node.lineno}")
    return sorted(set(found), key=lambda where: int(where.rsplit(":", 1)[1]))


CODE = sorted([*SRC.rglob("*.py"), *(ROOT / "scripts").glob("*.py"), *(ROOT / "tools").glob("*.py")])
PACKAGE_AND_TOOLS = sorted([*SRC.rglob("*.py"), *(ROOT / "tools").glob("*.py")])


def test_no_function_imports_minimodel_or_triton():
    """Imports are top-level: the entry decides compiled or interpreted before anything else is
    imported, the layers' arrows are the imports at the top, and a module that must stay torch-free
    for the Snakefile's process is split rather than importing late (contenders/catalog.py beside
    contenders/builtin.py)."""
    assert [where for path in PACKAGE_AND_TOOLS for where in local_imports(path)] == []


def test_an_import_inside_a_function_of_the_package_says_why():
    """What the package still imports late is an optional package (FlashAttention-2, -4), or torch
    and matplotlib where the Snakefile's process imports the module: each says why, on its line
    or the line above."""
    silent = []
    for path in SRC.rglob("*.py"):
        lines = path.read_text().splitlines()
        for where in local_imports(path, tops=None):
            line = int(where.rsplit(":", 1)[1])
            if "#" not in lines[line - 1] and not lines[line - 2].strip().startswith("#"):
                silent.append(where)
    assert silent == []


def test_the_check_sees_an_import_inside_a_function(tmp_path):
    (tmp_path / "m.py").write_text("import torch\n\n\ndef f():\n    import triton.language as tl\n"
                                   "    from minimodel.floor import contract\n    import numpy\n")
    assert local_imports(tmp_path / "m.py", root=tmp_path) == ["m.py:5", "m.py:6"]
    assert local_imports(tmp_path / "m.py", tops=None, root=tmp_path) == ["m.py:5", "m.py:6", "m.py:7"]


def test_no_import_waits_for_a_switch():
    # an import after code (E402) was how a switch once had to come first; the entry made it needless
    waiting = [str(p.relative_to(ROOT)) for p in CODE if "noqa: E402" in p.read_text()]
    assert waiting == []


# The rules whose jobs run no kernel where no GPU can be: they import no torch there (1.5 s of CPU
# a job; `floor/provenance/devices.py`). Those of the GPU stages that measure on a GPU import what
# measures only where one may be, and write their planned rows without it. Every other script may
# import it (the CPU stages, the correctness shards and decode, which run the kernel under Triton's
# interpreter, and the correctness gather, which applies its rule), and the package's stages do.
NO_KERNEL_SCRIPTS = ("symbolic", "plots", "readme", "compare", "compare_verdict", "verify",
                     "gpu_warm", "gpu_timing_shard", "gpu_timing", "gpu_bytes_shard", "gpu_bytes",
                     "decode_symbolic", "decode_plots", "cpu_bytes")


def top_level_imports(path: Path) -> list[str]:
    """A file's import statements at its top level, as written."""
    return [ast.unparse(node) for node in ast.parse(path.read_text()).body
            if isinstance(node, ast.Import | ast.ImportFrom)]


def imports_torch(scripts) -> bool:
    """Whether a process that imports what `scripts` import and records a manifest's machine
    (`machine.environment`) imports torch, TRITON_INTERPRET unset as in a job."""
    lines = {line for name in scripts for line in top_level_imports(ROOT / "scripts" / f"{name}.py")}
    code = "\n".join(["import sys", *sorted(lines, key=lambda line: "minimodel.entry" not in line),
                      "from minimodel.floor.provenance import machine", "machine.environment()",
                      "print('torch' in sys.modules)"])
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.split()[-1].lower())


@pytest.mark.skipif(devices.may_have_gpu(), reason="checks a machine without a GPU's device nodes")
def test_a_job_that_runs_no_kernel_imports_no_torch_where_no_gpu_can_be():
    assert not imports_torch(NO_KERNEL_SCRIPTS)
    assert imports_torch(["cpu_roofline"])  # the check sees torch where a job takes it
