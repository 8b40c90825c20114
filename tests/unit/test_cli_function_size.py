"""The command line stays readable: no function in cargoship/ over 60 lines (decorators and
docstring included), so a subcommand's handler reads on one screen. A subcommand is a row
of cargoship/cli.py's COMMANDS, its handler a small function of its own module."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 60


def _sizes(package: str) -> list[tuple[int, str]]:
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                assert node.end_lineno is not None
                found.append((node.end_lineno - first + 1,
                              f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"))
    return found


def test_no_function_in_the_command_line_is_over_60_lines() -> None:
    sizes = _sizes("cargoship")
    assert sizes, "no function found: is the package where this test looks?"
    long = sorted(f"{where}: {lines} lines" for lines, where in sizes if lines > MAX_LINES)
    assert not long, long


def test_every_subcommand_has_a_handler_in_the_table() -> None:
    import argparse

    from cargoship.cli import COMMANDS, build_parser

    sub = next(a for a in build_parser()._actions
               if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == list(COMMANDS)
    assert all(callable(c.handler) and callable(c.arguments) for c in COMMANDS.values())
