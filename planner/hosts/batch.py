"""Facts and fact batches: many reads, one remote round trip.

A fact is a read-only POSIX sh snippet plus a pure function that parses its output (the
pyinfra pattern, so parsers are tested with data fixtures). A phase gathers all the facts
it needs from a host in one batch: one script, one SSH exec, one round trip.

The sections of the combined output are delimited by a random token chosen per batch, so a
file's content cannot forge a boundary.
"""

from __future__ import annotations

import secrets
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")
# sbin directories are missing from a non-root user's PATH on several distros.
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The user's uid, for facts to write where they would run `id -u`: a batch asks once for
# all its facts (three did, a program each on every plan); run alone, a fact asks itself.
UID = "${cs_uid:-$(id -u)}"


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
            lines.append("cs_uid=$(id -u)")
        for index, fact in enumerate(self.facts):
            # A subshell keeps one fact's `cd`/variables/`exit` from leaking into the next;
            # stdin from /dev/null keeps a command from swallowing anything.
            lines.append(f"( {fact.command}\n) </dev/null")
            lines.append(f"printf '\\n{self.token} {index} %d\\n' $?")
        return "\n".join(lines) + "\n"

    def split(self, stdout: str) -> list[Output]:
        # Plain string splitting on the token (no pattern compiled per batch: a regex per
        # host was a visible part of a large plan's CPU).
        chunks = stdout.split(f"\n{self.token} ")
        outputs: list[Output] = []
        pending = chunks[0]
        for chunk in chunks[1:]:
            head, newline, rest = chunk.partition("\n")
            index, _, code = head.partition(" ")
            if not newline or not index.isdigit() or not code.isdigit():
                break  # a marker cut short: the script ended there
            if int(index) != len(outputs):
                raise FactParseError("remote script output is out of order")
            outputs.append(Output(pending, int(code)))
            pending = rest
        if len(outputs) != len(self.facts):
            raise FactParseError(
                f"remote script ended early: {len(outputs)} of {len(self.facts)} reads finished")
        return outputs
