"""The code's shape, checked on every ``make test``: no module over 600 lines, no function over 80.

Small rooms are a project standard (README, issue 34): a module that holds two things, or a function that
does several, is where a reader gets lost and where a change lands in the wrong place. The check reads the
source with ``ast`` (no import), over ``streamgnn/``, ``connectors/`` and ``benchmarks/`` (the real folders;
``streamgnn/connectors`` and ``streamgnn/benchmarks`` are links to the last two). A function's length is
its lines from ``def`` (decorators included) to its last line, nested functions counted in their parent.

Exceptions are named, each with its reason (``EXCEPTED``): generated or table-like code only.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("streamgnn", "connectors", "benchmarks")
MODULE_LINES = 600
FUNCTION_LINES = 80

# "path" (a module) or "path::Qual.name" (a function) -> why it may be longer
EXCEPTED: dict[str, str] = {
    "streamgnn/store/kernels.py::apply_events": "a Numba kernel: its 25 arrays take one line each (ruff's "
    "format), and its one loop over events is the ingest's inner loop, where a call per event would cost",
}


def _files():
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if not path.is_symlink() and not any(p.is_symlink() for p in path.parents if ROOT in p.parents):
                yield path


def _functions(tree: ast.AST, prefix: str = ""):
    """``(qualified name, lines)`` of every function not nested in another (nested ones count in theirs)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            yield prefix + node.name, node.end_lineno - first + 1
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, prefix + node.name + ".")


def measure() -> dict[str, int]:
    """Every module over ``MODULE_LINES`` and function over ``FUNCTION_LINES``, with its length."""
    out = {}
    for path in _files():
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text()
        lines = len(text.splitlines())
        if lines > MODULE_LINES:
            out[rel] = lines
        for name, n in _functions(ast.parse(text, rel)):
            if n > FUNCTION_LINES:
                out[f"{rel}::{name}"] = n
    return out


def test_no_module_or_function_is_over_its_size():
    over = {k: v for k, v in measure().items() if k not in EXCEPTED}
    assert not over, f"over {MODULE_LINES} lines a module / {FUNCTION_LINES} a function: {over}"


def test_the_named_exceptions_still_exist():
    """A name left in the list after its code was split or renamed would hide nothing and mislead."""
    over = measure()
    stale = [k for k in EXCEPTED if k not in over]
    assert not stale, f"no longer over the limit (remove it from the list): {stale}"


def test_the_check_sees_an_offender(tmp_path):
    """The measure itself: a long function in a class, its decorator counted, a nested one not apart."""
    body = "\n".join(f"        x{i} = {i}" for i in range(FUNCTION_LINES))
    source = f"class A:\n    @staticmethod\n    def f():\n        def g():\n            pass\n{body}\n"
    got = dict(_functions(ast.parse(source)))
    assert got == {"A.f": FUNCTION_LINES + 4}
