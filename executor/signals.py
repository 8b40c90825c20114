"""How apply takes SIGINT, SIGTERM and SIGHUP: all three alike.

Ctrl-C is SIGINT; a CI system cancelling a job, `timeout` and systemd send SIGTERM; a
closed terminal sends SIGHUP. Each used to mean something else (only SIGINT was handled:
the other two killed apply mid-restart with nothing recorded and every lock left). Now:

* before anything may change (connect, lock, drift check): the apply stops there, says
  nothing was changed and releases the locks (SignalInterrupt, a KeyboardInterrupt);
* during the rollout: the first signal lets the host(s) in progress finish or roll back,
  starts no other host, writes every record, releases the locks and prints the summary;
  the exit code is 128 + the signal (130, 143, 129);
* a second signal during the rollout rolls the host(s) in progress back at once: every
  wait is cut short (each looks at least twice a second) and every API request in flight
  is ended; the rollback itself then runs to its end.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from planner.threads import start

from .errors import SignalInterrupt

INTERRUPTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def name(signum: int) -> str:
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


@dataclass
class Interrupts:
    progress: Callable[[str, str], None]
    stop: threading.Event  # set by the first signal once changing
    changing: threading.Event  # set once the rollout may change a host
    # Called (in a thread of their own: a handler must not take locks the interrupted
    # code may hold) on a second signal while changing.
    escalations: list[Callable[[], None]] = field(default_factory=list)
    received: list[int] = field(default_factory=list)
    _previous: dict[int, Any] = field(default_factory=dict)

    @property
    def first(self) -> int | None:
        return self.received[0] if self.received else None

    def __enter__(self) -> Interrupts:
        for signum in INTERRUPTS:
            try:
                self._previous[signum] = signal.signal(signum, self._handle)
            except ValueError:  # not the main thread (a library caller): left as it is
                break
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if not self.changing.is_set():
            self.received.append(signum)
            raise SignalInterrupt(signum)
        self.received.append(signum)
        if not self.stop.is_set():
            self.stop.set()
            self._say(f"{name(signum)}: finishing the host(s) in progress, then stopping "
                      "(again: roll them back now)")
            return
        self._say(f"{name(signum)} again: rolling the host(s) in progress back now")
        for escalate in list(self.escalations):
            start(escalate, name="cargoship-escalate")

    def _say(self, what: str) -> None:
        # From a thread of its own: the handler runs on the main thread, which may be
        # inside progress() holding its lock right now (a controller's rollout runs there).
        start(self.progress, args=("apply", what), name="cargoship-say")
