"""No function or method in headprune/ is over 80 lines (issue #47): a longer one is split where its parts
have names of their own.

A function's length is counted from its ``def`` line (decorators left out) to its last line, docstring and
comments included, nested functions and classes included in the function that holds them (and counted on
their own too).
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "headprune"
MAX_LINES = 80

# (file under headprune/, qualified name) -> why it may be longer. Only a function that is a table of data
# belongs here: splitting a table cuts it where nothing has a name.
ALLOWED: dict[tuple[str, str], str] = {}


def function_lengths() -> dict[tuple[str, str], int]:
    """(file under headprune/, qualified name such as ``Class.method`` or ``outer.inner``) -> lines."""
    lengths = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        file = path.relative_to(PACKAGE).as_posix()

        def visit(node, prefix=""):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    name = f"{prefix}{child.name}"
                    if not isinstance(child, ast.ClassDef):
                        lengths[file, name] = child.end_lineno - child.lineno + 1
                    visit(child, f"{name}.")
                else:
                    visit(child, prefix)

        visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    return lengths


def test_no_function_is_over_80_lines():
    too_long = {key: length for key, length in function_lengths().items()
                if length > MAX_LINES and key not in ALLOWED}
    assert not too_long, f"functions over {MAX_LINES} lines (split them where the parts have names):\n" + "\n".join(
        f"  headprune/{file}: {name}, {length} lines" for (file, name), length in sorted(too_long.items()))


def test_allowed_functions_are_still_long():
    """An entry of ALLOWED whose function is gone or no longer over the limit is stale: remove it."""
    lengths = function_lengths()
    stale = [key for key in ALLOWED if lengths.get(key, 0) <= MAX_LINES]
    assert not stale, "ALLOWED entries no longer needed:\n" + "\n".join(
        f"  headprune/{file}: {name} ({lengths.get((file, name), 'gone')})" for file, name in stale)
