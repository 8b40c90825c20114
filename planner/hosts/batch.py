"""Facts and fact batches: many reads, one remote round trip.

A fact is a read-only POSIX sh snippet plus a pure function that parses its output (the
pyinfra pattern, so parsers are tested with data fixtures). A phase gathers all the facts
it needs from a host in one batch: one script, one SSH exec, one round trip.

The sections of the combined output are delimited by a random token chosen per batch, so a
file's content cannot forge a boundary. A fact with a `limit` is cut by the reader
(Sections) one byte past it, so its parser refuses it as too long and a host that prints
without end costs this process no more than that.
"""

from __future__ import annotations

import secrets
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..safetext import decimal

T = TypeVar("T")
# sbin directories are missing from a non-root user's PATH on several distros.
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The user's uid, for facts to write where they would run `id -u`: a batch asks once for
# all its facts (three did, a program each on every plan); run alone, a fact asks itself.
UID = "${cs_uid:-$(id -u)}"
# The effective uid as `id -u` says it, from the shell's own /proc/self/status (the
# loop runs in the shell itself): no program to start; `id -u` where that cannot be read.
_ASK_UID = ("cs_uid=; while read -r cs_k _ cs_e _; do "
            '[ "$cs_k" = Uid: ] && { cs_uid=$cs_e; break; }; done 2>/dev/null </proc/self/status\n'
            'case $cs_uid in ""|*[!0-9]*) cs_uid=$(id -u);; esac')


class FactParseError(ValueError):
    """A host's output could not be understood; the message says what was expected."""


@dataclass(frozen=True)
class Output:
    stdout: str
    exit_code: int


@dataclass(frozen=True)
class Fact(Generic[T]):
    name: str
    command: str
    parse: Callable[[Output], T]
    limit: int | None = None  # the most bytes its parser reads; more are cut as they come


def quote(value: str) -> str:
    """Every value that reaches a remote command goes through here."""
    return shlex.quote(value)


@dataclass(frozen=True)
class Batch:
    facts: tuple[Fact[Any], ...]
    token: str

    @classmethod
    def of(cls, facts: Sequence[Fact[Any]]) -> Batch:
        return cls(tuple(facts), "cs" + secrets.token_hex(12))

    def script(self) -> str:
        lines = [f"export LC_ALL=C PATH={_PATH}"]
        if any(UID in fact.command for fact in self.facts):
            lines.append(_ASK_UID)
        for index, fact in enumerate(self.facts):
            # A subshell keeps one fact's `cd`/variables/`exit` from leaking into the next;
            # stdin from /dev/null keeps a command from swallowing anything.
            lines.append(f"( {fact.command}\n) </dev/null")
            lines.append(f"printf '\\n{self.token} {index} %d\\n' $?")
        return "\n".join(lines) + "\n"

    def sections(self) -> list[tuple[bytes, int | None, str]]:
        """Each fact's end marker, limit and name, in order, for Sections."""
        return [(f"\n{self.token} {index} ".encode(), fact.limit, fact.name)
                for index, fact in enumerate(self.facts)]

    def split(self, stdout: str) -> list[Output]:
        # Plain string splitting on the token (no pattern compiled per batch: a regex per
        # host was a visible part of a large plan's CPU).
        chunks = stdout.split(f"\n{self.token} ")
        outputs: list[Output] = []
        pending = chunks[0]
        for chunk in chunks[1:]:
            head, newline, rest = chunk.partition("\n")
            index, _, code = head.partition(" ")
            number, exit_code = decimal(index), decimal(code)
            if not newline or number is None or exit_code is None:
                break  # a marker cut short: the script ended there
            if number != len(outputs):
                raise FactParseError("remote script output is out of order")
            outputs.append(Output(pending, exit_code))
            pending = rest
        if len(outputs) != len(self.facts):
            raise FactParseError(
                f"remote script ended early: {len(outputs)} of {len(self.facts)} reads finished")
        return outputs


class Sections:
    """A command's stdout as it arrives, each fact's part kept to its limit + 1 bytes: the
    rest is counted out, not kept (`kept` is what the parsers see). A part ends only at its
    own marker (the next index), so a forged or repeated one is content like any other."""

    _MARKER_TAIL = 24  # what a marker line may hold after the index: " <status>\n"

    def __init__(self, sections: Sequence[tuple[bytes, int | None, str]]) -> None:
        self.kept = bytearray()
        self._sections = list(sections)
        self._at = 0  # the part being read: facts before it have had their markers
        self._room = self._room_of(0)  # bytes of it still kept
        self._carry = b""  # the last chunk's end, where a marker may have begun
        self._in_marker = False

    def _room_of(self, index: int) -> int:
        if index >= len(self._sections):
            return 0  # nothing is printed after the last marker
        limit = self._sections[index][1]
        return sys.maxsize if limit is None else limit + 1

    def _keep(self, data: bytes | memoryview) -> None:
        part = data[:self._room]
        self.kept += part
        self._room -= len(part)

    def feed(self, data: bytes) -> None:
        buf = self._carry + data if self._carry else data
        self._carry = b""
        pos = 0
        while pos < len(buf) and (self._in_marker or self._at < len(self._sections)):
            if self._in_marker:
                end = buf.find(b"\n", pos)
                self._keep(memoryview(buf)[pos:len(buf) if end < 0 else end + 1])
                if end < 0:
                    return
                pos, self._in_marker, self._room = end + 1, False, self._room_of(self._at)
                continue
            marker = self._sections[self._at][0]
            found = buf.find(marker, pos)
            if found < 0:
                safe = max(pos, len(buf) - len(marker) + 1)
                self._keep(memoryview(buf)[pos:safe])
                self._carry = buf[safe:]
                return
            self._keep(memoryview(buf)[pos:found])
            self.kept += marker
            pos, self._at, self._in_marker = found + len(marker), self._at + 1, True
            self._room = self._MARKER_TAIL

    def where(self) -> str:
        """The fact whose output is arriving, for an error about it."""
        at = self._at - 1 if self._in_marker else self._at
        return f"reading {self._sections[at][2]}" if at < len(self._sections) else \
            "after the last read"

    def end(self) -> bytes:
        """Everything kept, once the output has ended."""
        carry, self._carry = self._carry, b""
        self._keep(carry)
        return bytes(self.kept)
