"""Read files on a host: kind, mode, owner and content, many files in one round trip.

Content travels base64-encoded so that any bytes (a binary file, a file holding our own
boundary token) arrive intact; files over the limit are reported, not transferred.

Nothing is read through a link: a path is examined with lstat (`stat` without -L, `[ -L ]`
first), and its content is read with `dd iflag=nofollow`, so a path swapped for a link
between the two yields no content rather than the link target's; the size then disagrees
with what stat said and the read is refused. Where dd has no `nofollow` (BusyBox), the
content is read only if the path is still not a link.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass

from ..hosts.batch import Fact, FactParseError, Output, quote
from ..safetext import decimal, octal
from .bounds import check_size


@dataclass(frozen=True)
class LiveFile:
    """A managed file as a host has it: what the desired file is compared against."""

    path: str
    exists: bool
    content: bytes = b""
    mode: int | None = None
    owner: str | None = None  # "uid:gid", numeric: names can lie, ids are what the kernel checks
    kind: str = "file"  # "file", or what else the path is ("symbolic link", "directory", ...)


MAX_FILE_BYTES = 1 << 20
# A directory listing's names: thousands of entries fit; a directory holding more is no
# engine's config directory.
MAX_DIR_LISTING = 1 << 20
# What `stat -c %F` calls the kinds a path can be, in the words the plan uses.
_KINDS = {"symbolic-link": "symbolic link", "directory": "directory",
          "character-special-file": "character device", "block-special-file": "block device",
          "fifo": "FIFO", "socket": "socket"}


class FileTooLarge(FactParseError):
    pass


def _read_script(p: str) -> str:
    # One block of the limit plus a byte: dd stops there itself, so no `head` runs behind
    # it, a program fewer per file. fullblock: a read that returns short (some network or
    # FUSE file systems) is read on, not taken for the end. A dd without either flag fails
    # before reading anything, and head reads instead.
    limit = MAX_FILE_BYTES + 1
    read = (f"{{ dd if={p} iflag=nofollow,fullblock bs={limit} count=1 2>/dev/null "
            f"|| {{ [ -L {p} ] || head -c {limit} {p}; }}; }}")
    return (f"if [ -L {p} ]; then echo 'other symbolic-link'; "
            f"elif [ -f {p} ]; then echo \"file $(stat -c '%a %u %g %s' {p})\"; "
            f"{read} | base64 -w0; echo; "
            f"elif [ -e {p} ]; then echo \"other $(stat -c %F {p} | tr ' ' -)\"; "
            f"else echo absent; fi")


def files_fact(paths: Sequence[str], list_dirs: Sequence[str] = ()) -> Fact[
        tuple[dict[str, LiveFile], dict[str, list[str]]]]:
    """Each path's state, plus the names of the entries in each of `list_dirs`."""
    parts = [_read_script(quote(path)) for path in paths]
    for directory in list_dirs:
        d = quote(directory)
        # The entries' names by the shell's own globbing (dot names included, `.` and `..`
        # not), each followed by a slash; no ls or tr to start. The order is the parse's.
        parts.append(f"if [ -d {d} ] && [ ! -L {d} ]; then printf 'dir '; "
                     f"for e in {d}/* {d}/.[!.]* {d}/..?*; do "
                     "{ [ -e \"$e\" ] || [ -L \"$e\" ]; } && printf '%s/' \"${e##*/}\"; done; "
                     f"echo; elif [ -e {d} ]; then echo notadir; else echo nodir; fi")
    command = "; ".join(parts) if parts else "true"
    limit = max_output(paths, list_dirs)
    return Fact("files", command, lambda out: _parse(out, paths, list_dirs), limit)


def max_output(paths: Sequence[str], list_dirs: Sequence[str]) -> int:
    """The most the files fact prints: each file's line and content (base64, 4/3 of its
    bytes), each directory's names."""
    per_file = 4096 + (MAX_FILE_BYTES + 3) // 3 * 4
    return len(paths) * per_file + len(list_dirs) * MAX_DIR_LISTING


def _parse(out: Output, paths: Sequence[str], list_dirs: Sequence[str]) -> tuple[
        dict[str, LiveFile], dict[str, list[str]]]:
    lines = check_size(out, max_output(paths, list_dirs), "the files listing").split("\n")
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
        elif len(head) == 2 and head[0] == "other":
            # Not a regular file: its kind is all the plan learns of it, never its target.
            files[path] = LiveFile(path, True, kind=_KINDS.get(head[1], "special file"))
        elif (len(head) == 5 and head[0] == "file" and octal(head[1], 18) is not None
              and all(decimal(h) is not None for h in head[2:])):
            mode, size = int(head[1], 8), int(head[4])
            if size > MAX_FILE_BYTES:
                take()
                raise FileTooLarge(f"{path} is {size} bytes; larger than "
                                   f"{MAX_FILE_BYTES >> 20} MiB, not an engine config file")
            try:
                content = base64.b64decode(take(), validate=True)
            except ValueError:  # binascii.Error, or a character that is not ASCII at all
                raise FactParseError(f"{path}: content arrived garbled") from None
            if len(content) != size:
                raise FactParseError(f"{path} changed while it was read (stat said {size} "
                                     f"bytes, read {len(content)})")
            files[path] = LiveFile(path, True, content, mode, f"{head[2]}:{head[3]}")
        else:
            raise FactParseError(f"unexpected file listing line {' '.join(head)[:60]!r}")
    listings: dict[str, list[str]] = {}
    for directory in list_dirs:
        kind, _, rest = take().partition(" ")
        if kind == "notadir":
            raise FactParseError(f"{directory} is not a directory (a link or a file): "
                                 "cargoship never writes through links")
        # Sorted here (code points: the byte order `ls` uses in the C locale), so the plan
        # lists a directory's entries in one order whatever the host's shell globbed.
        listings[directory] = sorted(n for n in rest.split("/") if n) if kind == "dir" else []
    return files, listings
