"""The restart script's runner: the script on a host in a thread of its own, every line of
its output an event on the restart's queue (restart_messages.py), and the Gate that holds
back its later parts until the rollout releases them.

A connection lost while the script runs is dialled again: before the start was asked for,
the whole script runs again (every step is idempotent: the engine stops again, a write
keeps its first backup); after it, only the watch part does, so the engine is not
restarted twice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from planner.errors import CargoshipError, CommandTimeout, ConnectionLost
from planner.threads import start

from .remote import MAX_RERUNS, HostWriter
from .restart_messages import Message, Rerun, ScriptEnded, ScriptFailed
from .swap_output import Deadline, OutputReader, Started
from .swap_script import GO, HELD_GO, SwapScript
from .waits import DEFAULT

log = logging.getLogger("cargoship.executor")


class Gate:
    """Holds a script sent ahead (RemoteSwap): at first the host has only its head
    (definitions, the staging of the files); `begin` releases the part that sets the
    marker, `open` its GO line (swap_script.go_line), which runs it. Its input then stays
    open for one more chunk (`finish`) until `end`. `cancel` ends its input before GO: it
    runs nothing more, and removes what it staged."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._chunks: list[str] = []  # released so far, in order
        self._open = self._cancelled = self._ended = False

    def begin(self, text: str) -> None:
        with self._changed:
            if not self._chunks and not self._cancelled:
                self._chunks.append(text)
                self._changed.notify_all()

    def open(self, go: str = HELD_GO) -> None:
        """Release the GO line `go` (swap_script.go_line: the host lock's id, which the
        host checks before it stops anything)."""
        with self._changed:
            assert self._chunks, "a script let go before it began"
            if not self._open and not self._cancelled:
                self._chunks.append(go)
                self._open = True
                self._changed.notify_all()

    def finish(self, text: str) -> bool:
        """Release `text`, the script's last input, after GO; False when it is too late
        (the input has ended) or too early."""
        with self._changed:
            if not self._open or self._ended:
                return False
            self._chunks.append(text)
            self._ended = True
            self._changed.notify_all()
            return True

    def end(self) -> None:
        """No more input: the script's shell then ends (its watch goes on until nobody
        reads it)."""
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def cancel(self) -> None:
        """Nothing once open: the script runs to its end."""
        with self._changed:
            if not self._open:
                self._cancelled = True
                self._changed.notify_all()

    @property
    def begun(self) -> bool:
        return bool(self._chunks)

    @property
    def held(self) -> bool:
        """Neither let go nor cancelled: the script is waiting, and silent."""
        return not self._open and not self._cancelled

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def next(self, sent: int) -> str | None:
        """Chunk number `sent` once released (blocks until then); None when there are no
        more: cancelled, or ended."""
        with self._changed:
            while sent >= len(self._chunks):
                if self._ended or self._cancelled:
                    return None
                self._changed.wait()
            return self._chunks[sent]


@dataclass
class RemoteSwap:
    """Runs the swap script on a host in a thread, every line of it an event. Its head goes
    to the host at once, the rest as the gate releases it; cancelled, it runs nothing more
    and the runner ends without a word."""

    writer: HostWriter
    script: SwapScript
    timeout: float
    push: Callable[[Message], None]
    gate: Gate
    silence: float = DEFAULT.silence  # without a line this long: the connection is lost
    started: bool = False
    # The run in progress is the one the gate feeds (not a watch run again after a lost
    # connection, whose input ended with it): `finish` reaches the host.
    finishable: bool = False
    _stop: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)  # the runner ended

    def start(self) -> None:
        start(self._guarded, name=f"cargoship-swap-{self.writer.label}")

    def _guarded(self) -> None:
        # Whatever happens here, the rollout waiting on the queue hears of it.
        try:
            self._run()
        except Exception as exc:  # a bug must fail the host, not hang the rollout
            log.debug("%s: restart script runner failed", self.writer.label, exc_info=True)
            self.push(ScriptFailed(CargoshipError(
                f"{self.writer.label}: running the restart script failed: "
                f"{type(exc).__name__}: {exc}")))
        finally:
            self.finished.set()

    def stop(self) -> None:
        """Stop reading: the script's next line fails to write and it exits."""
        self._stop.set()
        self.gate.end()

    def _feed(self, reader: OutputReader) -> Callable[[bytes], bool]:
        heard = [time.monotonic()]

        def feed(data: bytes) -> bool:
            # Called with b"" when a read times out: the script says something at least
            # every second once let go, so a long silence is a connection that is gone (a
            # cut cable sends no reset), not a slow host. Held at its GO it is silent.
            now = time.monotonic()
            if data or self.gate.held:
                heard[0] = now
            elif now - heard[0] > self.silence and not self._stop.is_set():
                raise ConnectionLost(self.writer.label, f"the host said nothing for "
                                                        f"{self.silence:g} s: connection lost")
            for event in reader.feed(data):
                if isinstance(event, Started):
                    self.started = True
                elif isinstance(event, Deadline):
                    # The watch is over: the script's shell may go too (kept for `finish`
                    # past it, it would otherwise wait, silent, for input that may not
                    # come).
                    self.gate.end()
                self.push(event)
            return not self._stop.is_set()
        return feed

    @staticmethod
    def _released(gate: Gate) -> Callable[[], bytes | None]:
        sent = [0]

        def hold() -> bytes | None:
            chunk = gate.next(sent[0])
            if chunk is None:
                return None
            sent[0] += 1
            return chunk.encode()
        return hold

    def _run(self) -> None:
        reruns = 0
        while True:
            gate = self.gate
            hold: Callable[[], bytes | None] | None = None
            if self.started:  # only the watch again, long let go
                script = self.script.head(swap=False) + GO
            else:
                # From the start again after a lost connection: what was released so far
                # goes at once, the rest as it is released.
                script, hold = self.script.head(), self._released(gate)
            self.finishable = hold is not None
            try:
                result = self.writer.stream_root(script, self._feed(
                    OutputReader(self.script.token)), self.timeout, hold)
            except (ConnectionLost, CommandTimeout) as exc:
                if self._stop.is_set() or gate.cancelled:
                    return
                if reruns >= MAX_RERUNS:
                    self.push(ScriptFailed(exc))
                    return
                reruns += 1
                try:
                    self.writer.reconnect(exc)
                except CargoshipError as again:
                    self.push(ScriptFailed(again))
                    return
                self.push(Rerun())
                continue
            except CargoshipError as exc:
                self.push(ScriptFailed(exc))
                return
            finally:
                self.finishable = False  # this run's input is gone with it
            if gate.cancelled:
                return  # cancelled: the host ran nothing, and nobody is listening
            first = result.stderr.decode("utf-8", "replace").strip().splitlines()[:1]
            self.push(ScriptEnded(result.exit_code, first[0][:300] if first else ""))
            return
