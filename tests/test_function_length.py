"""No library function longer than ``MAX_LINES`` (``def`` to its last line, docstring included):
a function that long does several jobs, and each wants its own name.

The functions over the limit today are listed in ``OVER_THE_LIMIT`` with their length: each may
only shrink, and its entry goes once it is split (the list only shrinks).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dircleaner"

MAX_LINES = 80

#: (file under dircleaner/, qualified name) → its length now, the most it may have
OVER_THE_LIMIT: dict[tuple[str, str], int] = {}


def function_lengths(source: str) -> Iterator[tuple[str, int]]:
    """Each function's qualified name (``Class.method``, ``outer.inner``) and its length in
    lines, from its ``def`` (decorators left out) to its last line."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    assert child.end_lineno is not None
                    yield name, child.end_lineno - child.lineno + 1
                yield from walk(child, f"{name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(ast.parse(source), "")


def lengths_in(package: Path) -> dict[tuple[str, str], int]:
    return {
        (path.relative_to(package).as_posix(), name): length
        for path in sorted(package.rglob("*.py"))
        for name, length in function_lengths(path.read_text("utf-8"))
    }


def test_no_library_function_is_longer_than_the_limit() -> None:
    lengths = lengths_in(PACKAGE)
    too_long = {
        where: length
        for where, length in lengths.items()
        if length > OVER_THE_LIMIT.get(where, MAX_LINES)
    }
    assert too_long == {}


def test_the_list_of_functions_over_the_limit_only_shrinks() -> None:
    """An entry whose function was split (or is gone) leaves the list."""
    lengths = lengths_in(PACKAGE)
    stale = {where for where in OVER_THE_LIMIT if lengths.get(where, 0) <= MAX_LINES}
    assert stale == set()


def test_lengths_count_from_the_def_to_the_last_line_nested_and_methods_too() -> None:
    source = (
        "@decorator\n"
        "def outer():\n"
        '    """Doc."""\n'
        "    def inner():\n"
        "        return 1\n"
        "    return inner\n"
        "class C:\n"
        "    async def method(self):\n"
        "        pass\n"
    )
    assert dict(function_lengths(source)) == {"outer": 5, "outer.inner": 2, "C.method": 2}
