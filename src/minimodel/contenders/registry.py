"""Which contenders a run has: the built-ins, the config's own (`contenders:`), and which of them
each stage runs (`gpu.correctness.contenders`, `gpu.timing.contenders`, `gpu.bytes.contenders`,
besides the kernel).

`check` runs before any job (the Snakefile calls it): an unknown name, a module that is not found,
a function that its module does not define, or a file that is not valid Python among those the
module imports (its helpers, followed through: `closure`) stops the run with one line naming the
contender or the file and line. It reads the sources and imports none: the workflow's process
does not run a user's code.
"""

from __future__ import annotations

import ast
import difflib
from pathlib import Path

from minimodel.contenders.catalog import BUILTINS
from minimodel.contenders.closure import closure
from minimodel.contenders.spec import Contender, ContenderError, module_path, parse
from minimodel.floor import contract as C
from minimodel.floor.provenance.project import ROOT

EXAMPLES = ROOT / "examples"  # where a contender's module is looked for after PYTHONPATH
SEARCH = (EXAMPLES,)
STAGES = ("correctness", "timing", "bytes")
# what each stage runs whatever its contenders list says: naming one of these again would give
# two rows of one implementation per point
ALWAYS_RUN = {"correctness": (C.TRITON,), "timing": C.IMPLEMENTATIONS, "bytes": (C.TRITON, C.NAIVE)}
BUILT_IN = "built-in"  # a built-in contender's entry among a rule's parameters (`entries`)


def defined(config: dict) -> dict[str, Contender]:
    """Every contender the run knows by name: the built-ins, then the config's."""
    found = dict(BUILTINS)
    for name, entry in (config.get("contenders") or {}).items():
        if name in BUILTINS or name in C.BYTES_SCHEMES:  # names the bytes stage gives its own rows
            raise ContenderError(f"contender {name!r}: the name is taken; choose another (built-ins: "
                                 f"{', '.join(BUILTINS)}; the project's rows: {', '.join(C.BYTES_SCHEMES)})")
        found[name] = parse(name, entry)
    return found


def selected(config: dict, stage: str) -> list[Contender]:
    """The contenders `stage` runs besides the project's kernel, in the config's order."""
    known = defined(config)
    names = config["gpu"][stage].get("contenders") or []
    always = ALWAYS_RUN[stage]
    for name in names:
        if name in always:
            raise ContenderError(f"contender {name!r} (gpu.{stage}.contenders): the stage runs it already; "
                                 f"leave out {', '.join(always)}")
        if name not in known:
            close = difflib.get_close_matches(name, [n for n in known if n not in always], n=1)
            own = ", ".join(n for n in known if n not in BUILTINS) or "none"
            raise ContenderError(f"contender {name!r} (gpu.{stage}.contenders) is neither a built-in "
                                 f"({', '.join(BUILTINS)}) nor under contenders: ({own})"
                                 + (f"; did you mean {close[0]!r}?" if close else ""))
    return [known[name] for name in names]


def entries(config: dict, stage: str) -> dict[str, dict | str]:
    """The contenders `stage` runs as a rule's parameter: name -> the config's entry, or BUILT_IN
    (a rule's `params.contenders`, whose change reruns the rule; its script reads them back with
    `from_params`)."""
    own = config.get("contenders") or {}
    return {c.name: own.get(c.name, BUILT_IN) for c in selected(config, stage)}


def from_params(entries: dict[str, dict | str]) -> list[Contender]:
    """The contenders a rule's `params.contenders` names (`entries`), in its order."""
    return [BUILTINS[name] if entry == BUILT_IN else parse(name, entry) for name, entry in entries.items()]


def user_modules(config: dict, stage: str) -> list[Path]:
    """The files of the user's contenders that `stage` runs: each module's, its packages'
    `__init__`, and every file they import that no installed distribution holds
    (`closure.closure`): its rule's inputs, hashed into its manifest, so that editing one re-runs
    exactly the rules that run it."""
    return sorted({path for c in selected(config, stage) if c.name not in BUILTINS
                   for path in closure(c, SEARCH).files})


def user_packages(config: dict, stage: str) -> dict[str, str]:
    """The installed distributions the user's contenders that `stage` runs import, each with its
    version (name -> version): recorded in its manifest, where their files are not."""
    found = {}
    for c in selected(config, stage):
        if c.name not in BUILTINS:
            found.update(closure(c, SEARCH).packages)
    return dict(sorted(found.items()))


def check(config: dict) -> None:
    """Every selected contender can be found and names a function its module defines, which
    takes (q, k, v, causal=...) where its source says so (a plain `def`, not decorated); every
    file it imports is valid Python (`closure`: the rules' inputs, read here first so that a
    helper's syntax error is one line before any job, as the module's own is)."""
    for stage in STAGES:
        for contender in selected(config, stage):
            if contender.name in BUILTINS:
                continue
            path = module_path(contender, SEARCH)
            closure(contender, SEARCH)  # a helper that is not valid Python: its file and line
            function = contender.fn.split(":")[1]
            names = _top_level_names(path)
            if names is not None and function not in names:
                raise ContenderError(f"contender {contender.name!r}: module {contender.fn.split(':')[0]!r} "
                                     f"({path}) defines no function {function!r}")
            node = names.get(function) if names else None
            why = _signature_problem(node) if node is not None and not node.decorator_list else None
            if why:
                raise ContenderError(f"{path}, line {node.lineno}: contender {contender.name!r}: "
                                     f"{function}() {why}; a contender is called as "
                                     f"{function}(q, k, v, causal=...)")


def _signature_problem(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """Why a def cannot be called as fn(q, k, v, causal=...), or None when it can."""
    args = node.args
    positional = [a.arg for a in args.posonlyargs + args.args]
    if len(positional) < 3 and args.vararg is None:
        taken = ", ".join(positional) or "none"
        return f"takes {len(positional)} positional parameter(s) ({taken}), not q, k, v"
    if "causal" in positional[:3]:
        return f"takes causal as parameter {positional.index('causal') + 1}, where q, k, v go"
    keywords = [a.arg for a in args.args] + [a.arg for a in args.kwonlyargs]
    if "causal" not in keywords and args.kwarg is None:
        return "has no causal parameter"
    required = positional[3:len(positional) - len(args.defaults)]
    required += [a.arg for a, default in zip(args.kwonlyargs, args.kw_defaults, strict=True)
                 if default is None]
    required = [name for name in required if name != "causal"]
    if required:
        return f"requires {', '.join(required)}, which the pipeline does not pass"
    return None


def _top_level_names(path: Path) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef | None] | None:
    """Names a module's source binds outside any function (under `if`, `try` and `with` too),
    each with its `def` (None where bound otherwise, or more than once), or None where the source
    cannot say: not a .py file (a compiled extension), or `import *`."""
    if path.suffix != ".py":
        return None
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except SyntaxError as err:
        raise ContenderError(f"{path}, line {err.lineno}: not valid Python: {err.msg}") from None
    names: dict[str, ast.FunctionDef | ast.AsyncFunctionDef | None] = {}
    blocks = [tree.body]
    while blocks:
        for node in blocks.pop():
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names[node.name] = None if node.name in names else node
            elif isinstance(node, ast.ClassDef):
                names[node.name] = None
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update({t.id: None for t in targets if isinstance(t, ast.Name)})
            elif isinstance(node, ast.Import | ast.ImportFrom):
                if any(a.name == "*" for a in node.names):
                    return None
                names.update({(a.asname or a.name).split(".")[0]: None for a in node.names})
            elif isinstance(node, ast.If | ast.Try | ast.With):
                blocks += [node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])]
                blocks += [h.body for h in getattr(node, "handlers", [])]
    return names
