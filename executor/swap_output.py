"""What the restart script (swap_script.py, executor/sh/swap.sh) says, and the reader that
turns its stdout, fed as it arrives, into events.

The script streams one line per event, so the executor hears of each step as it happens:

    <token> staged                      the new content is staged
    <token> marked                      the in-progress marker is set (if it was given)
    <token> before ... <token> end      the engine before anything happens to it
    <token> starting | state            a probe of the engine (readiness.probe_script;
                                        `starting`, right before the start: controllers),
    ...                                 its lines, then `<token> end`
    <token> stopped <unix seconds>      the engine is down; the host's clock then
    <token> done <index> <result>       a file step finished (`backup`, `new`, a count)
    <token> started                     the start was asked for
    <token> cleared <exit code>         the command sent last (`finish`) ended
    <token> alive                       nothing changed for a second (the client is there)
    <token> go                          right before the stop: a write that a closed
                                        channel makes fail (no event: OutputReader skips it)
    <token> deadline                    the watch ran out of time

The token is random per script (SwapScript.of): a line without it is not the script's
own, so no probe output can forge a line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from planner.safetext import decimal

from .readiness import EngineState, parse_probe


@dataclass(frozen=True)
class Probed:
    name: str  # before, starting, state
    state: EngineState


@dataclass(frozen=True)
class Stopped:
    at: int  # the host's clock, whole seconds, once the engine was down


@dataclass(frozen=True)
class StepDone:
    index: int
    result: str  # backup, new, or a count (restore of a whole backup)


@dataclass(frozen=True)
class Marked:
    pass


@dataclass(frozen=True)
class Staged:
    pass  # the new content is on the host, beside its targets


@dataclass(frozen=True)
class Started:
    pass


@dataclass(frozen=True)
class Cleared:
    exit_code: int  # of the command sent with `finish`


@dataclass(frozen=True)
class Alive:
    pass


@dataclass(frozen=True)
class Deadline:
    pass


Event = Probed | Stopped | StepDone | Marked | Staged | Started | Cleared | Alive | Deadline
_LINE = re.compile(r"(before|starting|state|end|stopped|done|marked|staged|started|"
                   r"cleared|alive|deadline)"
                   r"(?: (\S+))?(?: (\S+))?")


class OutputReader:
    """Turns the script's stdout, fed as it arrives, into events."""

    def __init__(self, token: str) -> None:
        self._prefix = token + " "
        self._pending = b""
        self._block: tuple[str, list[str]] | None = None

    def feed(self, data: bytes) -> list[Event]:
        self._pending += data
        *lines, self._pending = self._pending.split(b"\n")
        events: list[Event] = []
        for raw in lines:
            event = self._line(raw.decode("utf-8", "replace"))
            if event is not None:
                events.append(event)
        return events

    def _line(self, line: str) -> Event | None:
        if not line.startswith(self._prefix):
            if self._block is not None:
                self._block[1].append(line)
            return None  # not the script's own line: nothing a host can forge
        found = _LINE.fullmatch(line[len(self._prefix):])
        if found is None:
            return None
        word, first, second = found.groups()
        if word in ("before", "starting", "state"):
            self._block = (word, [])
        elif word == "end" and self._block is not None:
            name, body = self._block
            self._block = None
            return Probed(name, parse_probe("\n".join(body)))
        elif word == "stopped" and (number := decimal(first or "")) is not None:
            return Stopped(number)
        elif word == "done" and (number := decimal(first or "")) is not None:
            return StepDone(number, second or "new")
        elif word == "marked":
            return Marked()
        elif word == "staged":
            return Staged()
        elif word == "started":
            return Started()
        elif word == "cleared" and (number := decimal(first or "")) is not None:
            return Cleared(number)
        elif word == "alive":
            return Alive()
        elif word == "deadline":
            return Deadline()
        return None
