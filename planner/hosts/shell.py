"""Shell that runs on hosts lives in `.sh` files beside the modules that send it, shipped
as package data; Python renders only a block of variables on top (every value through
quote) and then the files, verbatim. The files are checked by shellcheck (scripts/test.sh)
and run for real by the unit tests."""

from __future__ import annotations

import functools
import importlib.resources
import re

from .batch import quote

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@functools.cache
def load(package: str, name: str) -> str:
    """The text of `name` in `package`'s `sh/` directory, as shipped, less its comment
    lines and blank lines: they are for the reader of the file, and every host would
    receive them (a restart script goes to each host as it rolls). The files hold no
    here-document, so no such line is data."""
    text = importlib.resources.files(package).joinpath("sh", name).read_text("utf-8")
    return "".join(line for line in text.splitlines(keepends=True)
                   if line.strip() and not line.lstrip().startswith("#"))


def variables(values: dict[str, str | int]) -> str:
    """The generated block: one assignment a line, each value quoted."""
    for name in values:
        if not _NAME.fullmatch(name):
            raise ValueError(f"not a shell variable name: {name!r}")
    return "".join(f"{name}={quote(str(value))}\n" for name, value in values.items())


def script(package: str, files: tuple[str, ...], values: dict[str, str | int]) -> str:
    """The generated block, then each file of `package`'s `sh/` in order."""
    return variables(values) + "".join(load(package, name) for name in files)
