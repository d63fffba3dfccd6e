"""The package's layers (ARCHITECTURE.md): a stage reads the files it is given, never another
stage's code. What several stages share lies on a floor below them, and the floor imports no stage.
"""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "minimodel"

# below every stage: what stages hand each other, and what several of them use
FLOOR = {"contract", "attention_ref", "timers", "roofline_model", "symbolic", "subprocesses",
         "provenance"}
# each stage's packages, and the packages of its own stage below it (stage 3: the GPU stage runs the
# contenders, and the contenders run the kernel; nothing runs back up)
STAGES = {"cpu": set(), "gpu": {"contenders", "kernel"}, "contenders": {"kernel"}, "kernel": set(),
          "report": set()}
ENTRY_POINTS = {"__main__"}  # `python -m minimodel`: above every stage


def minimodel_imports(path: Path) -> set[str]:
    """The top-level parts of minimodel (`cpu`, `contract`, ...) a file imports, anywhere in it."""
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
        allowed = FLOOR | {layer} | STAGES.get(layer, set())
        bad += [f"{path.relative_to(SRC)} -> minimodel.{name}"
                for name in sorted(minimodel_imports(path) - allowed)]
    return bad


def test_every_part_of_the_package_is_a_stage_the_floor_or_an_entry_point():
    parts = {layer_of(p) for p in SRC.rglob("*.py")} - {"__init__"}
    assert parts <= FLOOR | set(STAGES) | ENTRY_POINTS, "a new part: place it in FLOOR or STAGES"


def test_no_stage_imports_another_stage_and_the_floor_imports_no_stage():
    assert crossings() == []


def test_the_check_sees_a_crossing(tmp_path, monkeypatch):
    fake = tmp_path / "minimodel"
    for rel, text in {"contenders/run.py": "def f():\n    from minimodel.gpu.bench import bench_ms\n",
                      "gpu/timing.py": "from minimodel.cpu import roofline\n",
                      "timers.py": "import minimodel.gpu.timing\n",
                      "gpu/hbm.py": "from minimodel import kernel, symbolic\n"}.items():
        (fake / rel).parent.mkdir(parents=True, exist_ok=True)
        (fake / rel).write_text(text)
    monkeypatch.setattr(f"{__name__}.SRC", fake)
    assert crossings() == ["contenders/run.py -> minimodel.gpu", "gpu/timing.py -> minimodel.cpu",
                           "timers.py -> minimodel.gpu"]
