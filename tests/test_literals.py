"""Each word of the contract typed once: the status and skip words, the grid names and the scheme
names that the tables hold are `minimodel.floor.contract`'s constants, and no other file of src/,
scripts/ or tools/ types them again.

A string literal offends when it is one of the words, or begins with one followed by ":" (a status
with its reason: "skipped: no CUDA device"). An f-string offends in the same way by its opening text
(f"failed: {err}"); the text after a placeholder is prose around a value, not a status. English that
merely holds a word ("the kernel failed its check") does not offend, nor does a status word where
it names a column or a key rather than being a status (`row["skipped"]`, `{"failed": 0}`,
`summary.get("measured")`): a grid's or a scheme's name is data wherever it stands.
"""

import ast
from pathlib import Path

from minimodel.floor import contract

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / "src" / "minimodel" / "floor" / "contract.py"
CODE = sorted([*(ROOT / "src").rglob("*.py"), *(ROOT / "scripts").glob("*.py"),
               *(ROOT / "tools").glob("*.py")])

STATUS_WORDS = (contract.OK, contract.MEASURED, contract.NOT_MEASURED, contract.SKIPPED,
                contract.NO_GPU_TIMING, contract.FAILED, contract.FAILED_CHECK, contract.OUT_OF_MEMORY,
                contract.UNSUPPORTED)
SCHEMES = (contract.NAIVE_SCHEME, contract.FLASH_SCHEME, contract.NAIVE_FP32_SOFTMAX_SCHEME)
WORDS = (*STATUS_WORDS, *contract.GRIDS, *SCHEMES)


def offends(text: str) -> str | None:
    """The contract word `text` types (the word itself, or the word and ":" before a reason), or None."""
    for word in WORDS:
        if text == word or text.startswith(word + ":"):
            return word
    return None


def _keys(node) -> list:
    """The literals that a subscript, or the test of which key it takes, can name."""
    if isinstance(node, ast.IfExp):
        return _keys(node.body) + _keys(node.orelse)
    if isinstance(node, ast.Tuple):
        return [k for e in node.elts for k in _keys(e)]
    return [node] if isinstance(node, ast.Constant) else []


NAMING_KEYWORDS = ("metric", "column", "columns")  # keyword arguments that take a column's name


def names(tree) -> set[int]:
    """ids of the literals that name a column or a key: a subscript's, a dict display's keys, the
    key of `.get`, `.setdefault` and `.pop`, a keyword argument naming a column (`metric=`,
    `columns=`, `<x>_key=`), and the elements of a list of column names (two or more
    identifier-like strings)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg and (node.arg in NAMING_KEYWORDS
                                                           or node.arg.endswith("_key")):
            found += _keys(node.value)
        elif isinstance(node, ast.List) and len(node.elts) >= 2 and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value.isidentifier()
                for e in node.elts):
            found += node.elts
        elif isinstance(node, ast.Subscript):
            found += _keys(node.slice)
        elif isinstance(node, ast.Dict):
            found += [k for k in node.keys if isinstance(k, ast.Constant)]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("get", "setdefault", "pop") and node.args):
            found += _keys(node.args[0])
    return {id(k) for k in found}


def typed_words(source: str) -> list[tuple[int, str]]:
    """(line, word) of every string literal in `source` that types a contract word."""
    tree = ast.parse(source)
    inside_fstrings = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)
                       for part in node.values}
    named = names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            first = node.values[0] if node.values else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                # alone, the whole string; before a placeholder, only as a status with its reason
                word = offends(first.value) if len(node.values) == 1 else next(
                    (w for w in WORDS if first.value.startswith(w + ":")), None)
                if word:
                    found.append((node.lineno, word))
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and id(node) not in inside_fstrings):
            word = offends(node.value)
            if word and not (word == node.value and word in STATUS_WORDS and id(node) in named):
                found.append((node.lineno, word))
    return sorted(found)


def offenders() -> list[str]:
    return [f"{path.relative_to(ROOT)}:{line}: {word!r}" for path in CODE if path != CONTRACT
            for line, word in typed_words(path.read_text())]


def test_the_contracts_words_are_typed_in_the_contract_alone():
    assert offenders() == []


def test_the_check_sees_a_typed_word_and_lets_prose_and_the_contracts_names_pass():
    source = '\n'.join([
        'a = "skipped"',  # 1: the word
        'b = "failed: out of time"',  # 2: a status with its reason
        'c = f"unsupported: {why}"',  # 3: the same in an f-string
        'd = f"{name} failed: {why}"',  # prose around a value
        'e = "the kernel failed its check"',  # English holding a word
        'f = f"{contract.FAILED}: {why}"',  # the contract's name
        'g = ("lab", "flashattention")',  # 7: the grids
        'h = {"naive_fp32_softmax": 1, "naive_fp32_softmax_bytes": 2}',  # 8: a scheme; a key that names one
        'i = f"flash"',  # 9: an f-string that is the word alone
        'j = "okay"',  # another word that begins like one
        'k = row["skipped"] or counts["failed" if x else "ok"] or s.get("measured") or {"ok": 1}',  # keys
        'row["status"] = "skipped"',  # 12: a status, set under its column's name
        'l = {"naive": 1}["flash"]',  # 13: schemes as keys are data
        'm = r["skipped: why"]',  # 14: never a key
        'n = table(["B", "skipped", "reason"]) or row(metric="skipped") or f(done_key="measured")',  # names
        'o = ["skipped"] or g(status="skipped") or ["skipped", "not a column"]',  # 16: statuses
    ])
    assert typed_words(source) == [(1, contract.SKIPPED), (2, contract.FAILED), (3, contract.UNSUPPORTED),
                                   (7, contract.FLASHATTENTION_GRID), (7, contract.LAB_GRID),
                                   (8, contract.NAIVE_FP32_SOFTMAX_SCHEME), (9, contract.FLASH_SCHEME),
                                   (12, contract.SKIPPED), (13, contract.FLASH_SCHEME),
                                   (13, contract.NAIVE_SCHEME), (14, contract.SKIPPED),
                                   (16, contract.SKIPPED), (16, contract.SKIPPED), (16, contract.SKIPPED)]
