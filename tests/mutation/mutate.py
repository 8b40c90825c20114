"""Apply one mutation to one source text: by function and pattern, never by line number.

A mutation names the function it breaks (`name`, `Class.method`, `outer.inner`) and a
literal piece of that function's source to replace. The piece is looked for inside the
function only, and must be found exactly `count` times: code that moved on is reported as
stale (the mutation needs rewriting), never silently left unmutated.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass


class Stale(Exception):
    """The mutation no longer applies to the code as it is."""


@dataclass(frozen=True)
class Mutation:
    rule: str        # the safety rule it breaks, as README/spec word it
    path: str        # repository-relative file
    function: str    # qualified name of the function (or class) holding `find`; "": the
    #                  whole file, for a file that is not Python
    find: str        # literal source text, searched within that function only
    replace: str
    tests: tuple[str, ...]  # pytest node ids (files or tests) that must kill it
    why: str = ""    # what the broken code would do to a user
    count: int = 1   # how many times `find` must occur in the function
    unit: bool = False  # killed by tests/unit alone (no lab): the quick set


def _span(tree: ast.Module, qualified: str) -> tuple[int, int]:
    """Line span (1-based, inclusive) of the function or class `qualified`."""
    body: list[ast.stmt] = tree.body
    node: ast.AST | None = None
    for part in qualified.split("."):
        node = next((n for n in body if isinstance(
            n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and n.name == part), None)
        if node is None:
            raise Stale(f"no function {qualified!r}")
        body = node.body
    assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    assert node.end_lineno is not None
    return first, node.end_lineno


def mutate(source: str, m: Mutation) -> str:
    """`source` with `m` applied; Stale when it does not apply exactly as written."""
    if not m.path.endswith(".py"):
        return _mutate_text(source, m)
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise Stale(f"{m.path} does not parse: {exc}") from None
    first, last = _span(tree, m.function)
    lines = source.splitlines(keepends=True)
    head, body, tail = lines[:first - 1], "".join(lines[first - 1:last]), lines[last:]
    found = body.count(m.find)
    if found != m.count:
        raise Stale(f"{m.path} {m.function}: {m.find!r} found {found} time(s), "
                    f"expected {m.count}")
    changed = "".join(head) + body.replace(m.find, m.replace) + "".join(tail)
    if changed == source:
        raise Stale(f"{m.path} {m.function}: the replacement changes nothing")
    try:
        ast.parse(changed)
    except SyntaxError as exc:
        raise Stale(f"{m.path} {m.function}: the mutated file does not parse: {exc}") from None
    return changed


def _mutate_text(source: str, m: Mutation) -> str:
    """A file that is not Python: `find` in the whole file, exactly `count` times."""
    if m.function:
        raise Stale(f"{m.path}: functions are named only in Python files, not "
                    f"{m.function!r}")
    found = source.count(m.find)
    if found != m.count:
        raise Stale(f"{m.path}: {m.find!r} found {found} time(s), expected {m.count}")
    changed = source.replace(m.find, m.replace)
    if changed == source:
        raise Stale(f"{m.path}: the replacement changes nothing")
    return changed
