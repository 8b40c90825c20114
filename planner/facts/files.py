"""Read files on a host: existence, mode, owner and content, many files in one round trip.

Content travels base64-encoded so that any bytes (a binary file, a file holding our own
boundary token) arrive intact; files over the limit are reported, not transferred.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence

from ..desired.compare import LiveFile
from ..hosts.batch import Fact, FactParseError, Output, quote

MAX_FILE_BYTES = 1 << 20


class FileTooLarge(FactParseError):
    pass


def files_fact(paths: Sequence[str], list_dirs: Sequence[str] = ()) -> Fact[
        tuple[dict[str, LiveFile], dict[str, list[str]]]]:
    """Each path's state, plus the names of the entries in each of `list_dirs`."""
    parts = []
    for path in paths:
        p = quote(path)
        parts.append(
            f"if [ -f {p} ]; then echo \"file $(stat -c '%a %U' {p}) $(stat -c %s {p})\"; "
            f"head -c {MAX_FILE_BYTES + 1} {p} | base64 -w0; echo; "
            f"elif [ -e {p} ]; then echo notafile; else echo absent; fi")
    for directory in list_dirs:
        d = quote(directory)
        parts.append(f"if [ -d {d} ]; then echo \"dir $(ls -A {d} | tr '\\n' '/')\"; "
                     "else echo nodir; fi")
    command = "; ".join(parts) if parts else "true"
    return Fact("files", command, lambda out: _parse(out, paths, list_dirs))


def _parse(out: Output, paths: Sequence[str], list_dirs: Sequence[str]) -> tuple[
        dict[str, LiveFile], dict[str, list[str]]]:
    lines = out.stdout.split("\n")
    files: dict[str, LiveFile] = {}
    position = 0

    def take() -> str:
        nonlocal position
        if position >= len(lines):
            raise FactParseError("file listing ended early")
        position += 1
        return lines[position - 1]

    for path in paths:
        head = take().split()
        if head == ["absent"]:
            files[path] = LiveFile(path, exists=False)
        elif head == ["notafile"]:
            raise FactParseError(f"{path} exists but is not a regular file")
        elif len(head) == 4 and head[0] == "file":
            mode, owner, size = int(head[1], 8), head[2], int(head[3])
            if size > MAX_FILE_BYTES:
                take()
                raise FileTooLarge(f"{path} is {size} bytes; larger than "
                                   f"{MAX_FILE_BYTES >> 20} MiB, not an engine config file")
            try:
                content = base64.b64decode(take(), validate=True)
            except binascii.Error:
                raise FactParseError(f"{path}: content arrived garbled") from None
            files[path] = LiveFile(path, True, content, mode, owner)
        else:
            raise FactParseError(f"unexpected file listing line {' '.join(head)[:60]!r}")
    listings: dict[str, list[str]] = {}
    for directory in list_dirs:
        kind, _, rest = take().partition(" ")
        listings[directory] = [n for n in rest.split("/") if n] if kind == "dir" else []
    return files, listings
