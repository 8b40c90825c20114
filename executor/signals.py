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

A signal ignored when apply started stays ignored (the rule every Unix program that
catches signals keeps): `nohup` ignores SIGHUP so that the command outlives its terminal,
and a non-interactive shell starts its background jobs ignoring SIGINT so that the Ctrl-C
meant for the script does not reach them.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from planner.threads import start

from .errors import SignalInterrupt

INTERRUPTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
READER_EXIT = 5.0  # seconds __exit__ waits for the reader to take the last signals


def name(signum: int) -> str:
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


@dataclass
class Interrupts:
    """The handler only records the signal and writes its number to a pipe; a thread of
    its own reads the pipe and does the rest (stop, say, escalate). A handler runs on the
    main thread between any two bytecodes, in the middle of whatever that thread holds:
    setting an Event or starting a thread there takes locks (the Event's, threading's
    registry of threads) the interrupted code may hold, and the handler then waits on
    its own thread for ever. os.write takes none."""

    progress: Callable[[str, str], None]
    stop: threading.Event  # set by the first signal once changing
    changing: threading.Event  # set once the rollout may change a host
    # Called (each in a thread of its own) on a second signal while changing.
    escalations: list[Callable[[], None]] = field(default_factory=list)
    received: list[int] = field(default_factory=list)
    _previous: dict[int, Any] = field(default_factory=dict)
    _pipe: tuple[int, int] | None = None
    _reader: threading.Thread | None = None

    @property
    def first(self) -> int | None:
        return self.received[0] if self.received else None

    def __enter__(self) -> Interrupts:
        read_end, write_end = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(write_end, False)  # a full pipe drops a signal, never blocks one
        self._pipe = (read_end, write_end)
        self._reader = start(self._take, args=(read_end,), name="cargoship-signals")
        for signum in INTERRUPTS:
            if signal.getsignal(signum) is signal.SIG_IGN:
                continue  # ignored when apply started (nohup, a background job): it stays so
            try:
                self._previous[signum] = signal.signal(signum, self._handle)
            except ValueError:  # not the main thread (a library caller): left as it is
                break
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()
        if self._pipe is not None:
            read_end, write_end = self._pipe
            os.close(write_end)  # the reader takes what is left, then sees the end
            if self._reader is not None:
                self._reader.join(READER_EXIT)
            if self._reader is None or not self._reader.is_alive():
                os.close(read_end)  # else left to the process's end: never closed under it
            self._pipe = self._reader = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)  # a list's append takes no lock
        if not self.changing.is_set():
            raise SignalInterrupt(signum)
        if self._pipe is None:
            raise RuntimeError("Interrupts handler called outside its `with` block")
        try:
            os.write(self._pipe[1], bytes([signum]))
        except BlockingIOError:
            pass  # 64 KiB of signals not yet taken: this one adds nothing

    def _take(self, read_end: int) -> None:
        while chunk := os.read(read_end, 64):
            for signum in chunk:
                self._react(signum)

    def _react(self, signum: int) -> None:
        if not self.stop.is_set():
            self.stop.set()
            self.progress("apply", f"{name(signum)}: finishing the host(s) in progress, "
                                   "then stopping (again: roll them back now)")
            return
        # The waits are cut first: saying so may wait for a progress line being written.
        for escalate in list(self.escalations):
            start(escalate, name="cargoship-escalate")
        self.progress("apply", f"{name(signum)} again: rolling the host(s) in progress back "
                               "now")
