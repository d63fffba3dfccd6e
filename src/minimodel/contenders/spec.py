"""A contender: any attention forward the pipeline checks and times beside the project's kernel.

A user names one in the config by `module:function`, called as `fn(q, k, v, causal=...) -> O`
with q of shape (B, H, N, d) and O of q's shape and dtype:

    contenders:
      mine:
        fn: "my_attention:forward"   # found on PYTHONPATH, else under the project's examples/
        devices: [cuda]              # optional keys: what it supports; points it does not are
        dtypes: [float16]            # skipped with the reason
        head_dims: [64, 128]
        causal: [false, true]
        gqa: false                   # K, V with fewer heads than Q
        triton: true                 # a Triton kernel: under the CPU interpreter, bf16 is skipped
        timeout_s: 60                # per point; a call that outlasts it is a failed row
        grids: [flashattention]      # the timing grids it is timed on (lab, flashattention)
        layout: bnhd                 # it takes and returns (B, N, H, d) tensors instead
        backward: true               # autograd differentiates its forward: its backward is
                                     # checked and timed too

With `fn` alone a contender runs on every device, dtype and head dim, causal and not, without
grouped-query heads, on both timing grids, with `DEFAULT_TIMEOUT_S` per point, and no backward
(its backward rows are skipped rows saying so).

A contender given `layout: bnhd` gets contiguous (B, N, H, d) copies of Q, K and V, made once per
point outside any timed call, and returns O in that layout. A point it does not support can also
be declined when it is called: `raise NotImplementedError("why")` makes it a skipped row saying so.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import sysconfig
import traceback
from dataclasses import dataclass
from pathlib import Path

from minimodel.floor import contract

DEVICES = ("cuda", "cpu")
DTYPES = ("float16", "bfloat16")
DEFAULT_TIMEOUT_S = 120.0
# the layouts a contender may take: the stage's own (B, H, N, d), or (B, N, H, d)
BHND, BNHD = "bhnd", "bnhd"
LAYOUTS = (BHND, BNHD)
KEYS = {"fn", "devices", "dtypes", "head_dims", "causal", "gqa", "triton", "timeout_s", "grids", "layout",
        "backward"}


class ContenderError(ValueError):
    """A contender the config names but that cannot be run: one line, naming it."""


@dataclass(frozen=True)
class Contender:
    name: str
    fn: str
    devices: tuple[str, ...] = DEVICES
    dtypes: tuple[str, ...] = DTYPES
    head_dims: tuple[int, ...] | None = None  # None: any
    causal: tuple[bool, ...] = (False, True)
    gqa: bool = False
    triton: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S
    grids: tuple[str, ...] = contract.GRIDS  # the timing grids it is timed on
    layout: str = BHND  # the layout of the tensors it takes and returns
    backward: bool = False  # its forward is differentiable by autograd (dQ, dK, dV)

    def skip_reason(self, device: str, dtype: str, d: int, causal: bool, grouped: bool,
                    interpreted: bool) -> str | None:
        """Why this contender does not run at a point, or None when it does."""
        if device not in self.devices:
            return f"{self.name} runs on {', '.join(self.devices)}, not {device}"
        if dtype not in self.dtypes:
            return f"{self.name} takes {', '.join(self.dtypes)}, not {dtype}"
        if self.head_dims is not None and d not in self.head_dims:
            return f"{self.name} takes head dims {', '.join(map(str, self.head_dims))}, not {d}"
        if causal not in self.causal:
            return f"{self.name} does not run {'causal' if causal else 'non-causal'} attention"
        if grouped and not self.gqa:
            return f"{self.name} does not take grouped-query heads"
        if self.triton and interpreted and dtype == "bfloat16":
            return contract.BF16_INTERPRETER_REASON  # the kernel's reason
        return None

    def no_backward_reason(self) -> str | None:
        """Why this contender has no backward rows, or None when it has a backward."""
        if self.backward:
            return None
        return f"{self.name} has no backward (backward: true in its entry gives it one)"


def parse(name: str, entry: dict) -> Contender:
    """The config's entry for one contender, checked: unknown keys and bad values are one line."""
    if not isinstance(entry, dict) or "fn" not in entry:
        raise ContenderError(f"contender {name!r}: give at least fn: \"module:function\"")
    unknown = set(entry) - KEYS
    if unknown:
        raise ContenderError(f"contender {name!r}: unknown key(s) {', '.join(sorted(unknown))}; "
                             f"accepted: {', '.join(sorted(KEYS))}")
    fn = entry["fn"]
    if not isinstance(fn, str) or fn.count(":") != 1 or not all(fn.split(":")):
        raise ContenderError(f"contender {name!r}: fn is {fn!r}; accepted: \"module:function\"")

    def listed(key, allowed=None, kind=str):
        values = entry.get(key)
        if values is None:
            return None
        values = tuple(values) if isinstance(values, list | tuple) else (values,)
        bad = [v for v in values if type(v) is not kind or (allowed is not None and v not in allowed)]
        if bad or not values:
            accepted = ", ".join(map(str, allowed)) if allowed else f"a list of {kind.__name__}s"
            raise ContenderError(f"contender {name!r}: {key} is {entry[key]!r}; accepted: {accepted}")
        return values

    timeout = entry.get("timeout_s", DEFAULT_TIMEOUT_S)
    if type(timeout) not in (int, float) or not 0 < timeout <= 3600:
        raise ContenderError(f"contender {name!r}: timeout_s is {timeout!r}; accepted: a number of "
                             "seconds in (0, 3600]")
    layout = entry.get("layout", BHND)
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise ContenderError(f"contender {name!r}: layout is {layout!r}; accepted: {', '.join(LAYOUTS)}")
    for flag in ("gqa", "triton", "backward"):
        if type(entry.get(flag, False)) is not bool:
            raise ContenderError(f"contender {name!r}: {flag} is {entry[flag]!r}; accepted: true or false")
    return Contender(
        name=name, fn=fn,
        devices=listed("devices", DEVICES) or DEVICES,
        dtypes=listed("dtypes", DTYPES) or DTYPES,
        head_dims=listed("head_dims", kind=int),
        causal=listed("causal", (False, True), kind=bool) or (False, True),
        gqa=entry.get("gqa", False), triton=entry.get("triton", False), timeout_s=float(timeout),
        grids=listed("grids", contract.GRIDS) or contract.GRIDS,
        layout=layout, backward=entry.get("backward", False),
    )


def module_files(contender: Contender, search: tuple[Path, ...]) -> list[Path]:
    """The files Python runs to import the contender's module (PYTHONPATH first, then `search`):
    each parent package's `__init__` and the module's own file, last. Found without importing
    anything, so no code of the user's runs in the workflow's process."""
    module = contender.fn.split(":")[0]
    files, locations, spec = [], None, None
    with _searching(search):
        for depth in range(1, module.count(".") + 2):
            spec = _find_spec(".".join(module.split(".")[:depth]), locations)
            if spec is None:
                break
            if spec.origin and Path(spec.origin).is_file():  # a namespace package has no file
                files.append(Path(spec.origin).resolve())
            locations = spec.submodule_search_locations
            if locations is None and depth <= module.count("."):  # a module where a package must be
                spec = None
                break
    if spec is None or not spec.origin or not Path(spec.origin).is_file():
        where = ", ".join(str(p) for p in search)
        raise ContenderError(f"contender {contender.name!r}: module {module!r} not found "
                             f"(looked on PYTHONPATH and in {where})")
    return files


def _find_spec(name: str, locations):
    """A module's spec, importing nothing: a top-level name through importlib (which imports
    only the parents of dotted names), a submodule through the finders, in its package's folders."""
    if locations is None:
        try:
            return importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return None
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        spec = find(name, list(locations)) if find else None
        if spec is not None:
            return spec
    return None


def module_path(contender: Contender, search: tuple[Path, ...]) -> Path:
    """The file of the contender's module (PYTHONPATH first, then `search`), without importing it."""
    return module_files(contender, search)[-1]


def load(contender: Contender, search: tuple[Path, ...]):
    """The contender's function, imported; a missing module or function, or an error while its
    module or a helper it imports is imported, is one line naming it (`import_failure`)."""
    module_name, function = contender.fn.split(":")
    module_path(contender, search)
    with _searching(search):
        try:
            module = importlib.import_module(module_name)
        except Exception as err:  # a user's module may raise anything on import
            raise ContenderError(import_failure(err)) from err
    fn = getattr(module, function, None)
    if not callable(fn):
        raise ContenderError(f"contender {contender.name!r}: module {module_name!r} "
                             f"({module.__file__}) has no function {function!r}")
    return SequenceFirst(fn) if contender.layout == BNHD else fn


def import_failure(err: Exception) -> str:
    """An error raised while a contender's module was imported, as one line naming where: a syntax
    error's own file and line (the user's module or any helper it imports), else the innermost
    frame of code that is neither Python's import machinery, nor the standard library's, nor an
    installed package's (the user's line that raised, or imported what is missing)."""
    if isinstance(err, SyntaxError) and err.filename:
        return f"{err.filename}, line {err.lineno}: not valid Python: {err.msg}"
    installed = {Path(sysconfig.get_paths()[key]).resolve() for key in ("stdlib", "purelib", "platlib")}
    frames = [f for f in traceback.extract_tb(err.__traceback__)
              if not f.filename.startswith("<") and Path(f.filename).resolve() != Path(__file__).resolve()
              and not any(Path(f.filename).resolve().is_relative_to(p) for p in installed)]
    where = f"{frames[-1].filename}, line {frames[-1].lineno}: " if frames else ""
    message = str(err).splitlines()[0] if str(err) else ""
    return f"{where}{type(err).__name__}: {message}"


class SequenceFirst:
    """A contender that takes and returns (B, N, H, d): `prepare` copies the stage's (B, H, N, d)
    inputs to that layout once, outside any timed call; its output comes back as a view."""

    def __init__(self, fn):
        self.fn = fn

    @staticmethod
    def prepare(q, k, v):
        return tuple(x.transpose(1, 2).contiguous() for x in (q, k, v))

    def __call__(self, q, k, v, causal=False):
        return self.fn(q, k, v, causal=causal).transpose(1, 2)


def prepared(fn, q, k, v) -> tuple:
    """Q, K, V as the loaded contender `fn` takes them (its layout), made before any timed call."""
    return fn.prepare(q, k, v) if isinstance(fn, SequenceFirst) else (q, k, v)


def file_sha256(path: Path) -> str:
    """The hash a manifest records for a contender's module: the sha256 of its file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


class _searching:
    """`search` appended to sys.path for the block: PYTHONPATH and installed modules come first."""

    def __init__(self, search: tuple[Path, ...]):
        self.added = [str(p) for p in search if str(p) not in sys.path]

    def __enter__(self):
        sys.path.extend(self.added)

    def __exit__(self, *exc):
        for p in self.added:
            sys.path.remove(p)
