"""Bounded work on any host output: how much a fact reads, and how its parser reads it.

What a host prints is text from a machine that may be broken or lying: a program that
prints forever, a file that is a link to /dev/zero, one line of a million blanks. Every
fact is bounded twice, because either bound alone leaves a hole:

- its output is cut one byte past the fact's limit: by the command itself where it reads
  a file (`head -c`, `dd count=1`, a printf precision), and as it arrives by the reader
  (hosts/batch.py Sections, from the Fact's `limit`), so this process never holds more
  than that; what a host sends past it is read and dropped, up to 64 MiB a command
  (hosts/channel.py MAX_RECEIVED), then the command is ended.
- its parser refuses output over the limit before looking at it (`check_size`), as the
  parser must not depend on which command produced its input (the executor reuses some
  parsers on its own scripts' output; tests feed them anything).

Inside the limit the parse is linear: str.split and partition, and only regular
expressions that cannot backtrack (anchored, with no nested or overlapping quantifiers),
so no line, however long or strange, costs more than a pass over it.
"""

from __future__ import annotations

from ..hosts.batch import FactParseError, Output

# Longer lines are refused where a fact reads line-shaped listings of a few fields (ufw's
# rule table): no real line comes near it.
MAX_LINE = 4096


_SHELL_QUOTING = frozenset("\"'\\")


def plain_words(line: str) -> list[str] | None:
    """A line's words as shlex.split says them, where it holds nothing shlex treats
    specially (quotes, a backslash, a control or non-ASCII character): split at C speed.
    None for any other line: shlex's to split (linear, but a character at a time)."""
    if line.isascii() and line.isprintable() and _SHELL_QUOTING.isdisjoint(line):
        return line.split()
    return None


def size_of(text: str) -> int:
    """At least the bytes the host sent: the reader decodes with errors="replace", one
    character per invalid byte, so counting UTF-8 bytes never undercounts."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def check_size(out: Output | str, limit: int, what: str,
               error: type[FactParseError] = FactParseError) -> str:
    """The output's text, refused (`error`, naming `what`) when over `limit` bytes."""
    text = out.stdout if isinstance(out, Output) else out
    if len(text) > limit or size_of(text) > limit:
        raise error(f"{what}: the host printed more than {human(limit)}; "
                             "refused unread")
    return text


def bounded_lines(text: str, what: str, limit: int = MAX_LINE,
                  error: type[FactParseError] = FactParseError) -> list[str]:
    """text.splitlines(), refused (`error`, naming `what`) when a line is longer than
    `limit` characters."""
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        if len(line) > limit:
            raise error(f"{what}: line {number} is {len(line)} characters long "
                                 f"(more than {limit}); refused")
    return lines


def human(limit: int) -> str:
    if limit >= 1 << 20 and limit % (1 << 20) == 0:
        return f"{limit >> 20} MiB"
    if limit >= 1 << 10 and limit % (1 << 10) == 0:
        return f"{limit >> 10} KiB"
    return f"{limit} bytes"
