"""The README's CLI reference is checked against the parser: nothing missing, nothing stale."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from cargoship.cli import build_parser

README = Path(__file__).resolve().parents[2] / "README.md"


def reference() -> str:
    text = README.read_text()
    return text.split("## CLI reference", 1)[1].split("\n## ", 1)[0]


def test_every_command_and_option_is_documented() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    section = reference()
    # Global options are on every subcommand too; documented once, under "Global options".
    globals_ = {o for a in parser._actions for o in a.option_strings}
    for option in globals_ - {"-h", "--help"}:
        assert f"`{option}" in section.split("\n- ", 1)[0], option
    for name, command in sub.choices.items():
        assert f"`cargoship {name}`" in section, name
        assert command.epilog and "cargoship" in command.epilog, f"{name} has no example"
        block = section.split(f"`cargoship {name}`", 1)[1].split("\n- `cargoship ", 1)[0]
        for action in command._actions:
            for option in action.option_strings:
                if option not in globals_:
                    assert f"`{option}`" in block, f"{name} {option}"


def test_nothing_documented_that_does_not_exist() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    documented = set(re.findall(r"`cargoship ([a-z-]+)`", reference()))
    assert documented == set(sub.choices)
