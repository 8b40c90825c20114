"""An engine restart with a change, followed as it happens.

One remote script (swap_script.py) stops the engine, changes the files, starts the engine
and then reports its state from the host; the node's status arrives through the API's
watch (watch.py); readiness.Waiter judges, at every event, whether the host is back. The
script runs in a thread of its own and so does the watch: both hand their events to one
queue, which this module's loop reads. Only a controller's /readyz is asked at intervals.

A connection lost while the script runs is dialled again: before the start was asked for,
the whole script runs again (every step is idempotent: the engine stops again, a write
keeps its first backup); after it, only the watch part does, so the engine is not
restarted twice.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from planner.errors import CargoshipError, CommandError, CommandTimeout, ConnectionLost
from planner.hosts.ssh import ABANDONED

from . import api_shape
from .api_shape import ApiShapeError
from .file_writes import Written
from .host_lock import UNSAFE, WAIT_TIMEOUT, held_lock_id
from .mirror_pod import MirrorView
from .polling import pause
from .readiness import Waiter
from .remote import MAX_RERUNS, HostWriter
from .swap_output import (
    Cleared,
    Deadline,
    Event,
    Marked,
    OutputReader,
    Probed,
    Started,
    StepDone,
    Stopped,
)
from .swap_script import GO, GONE, HELD_GO, NOT_HELD, SwapScript, finish, go_line
from .swap_steps import Step
from .waits import DEFAULT, Waits
from .watch import WatchEvent, node_watcher

log = logging.getLogger("cargoship.executor")



class NothingStopped(CommandError):
    """The script let go (GO) ended before the stop, by its own checks: its apply gone, the
    lock not its own, an unsafe lock directory, the swap lock kept taken. Nothing was
    stopped and no file changed: the host needs no rollback."""


# swap_script.py / host_lock.py: the exits that end a script before its stop.
NOTHING_STOPPED = frozenset({GONE, NOT_HELD, UNSAFE, WAIT_TIMEOUT})


class RestartAborted(CommandError):
    """A second interrupt (Ctrl-C, SIGTERM, SIGHUP) while this host was in progress: the
    wait ends now and the host is rolled back."""


class RestartNotBegun(CommandError):
    """The restart script ended before its GO (a file's staging or the marker failed):
    it never reached the stop, so the engine runs on and no file changed."""


@dataclass(frozen=True)
class ScriptEnded:
    exit_code: int
    stderr: str  # its first line


@dataclass(frozen=True)
class ScriptFailed:
    error: CargoshipError


@dataclass(frozen=True)
class NodeVersion:
    node: dict[str, Any]


@dataclass(frozen=True)
class NodeUnreadable:
    why: str


# What the host lacks while nothing has been seen of it yet (see Waiter.waiting_for).
QUIET = ("not seen yet", "nothing seen yet", "not asked yet")

Message = Event | ScriptEnded | ScriptFailed | NodeVersion | NodeUnreadable


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
        threading.Thread(target=self._guarded, name=f"cargoship-swap-{self.writer.label}",
                         daemon=True).start()

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


@dataclass
class Restart:
    """Stop, change and start one host's engine, and wait until it is freshly back."""

    writer: HostWriter
    init: str
    service: str
    node: str
    controller: bool
    readyz: Callable[[], tuple[bool, str]] | None
    api: Any  # the official client's CoreV1Api
    ready_timeout: float
    note: Callable[[str], None]
    clock: Callable[[], float] = time.monotonic
    # Set by a second interrupt: stop waiting now (the caller rolls the host back).
    abort: threading.Event = field(default_factory=threading.Event)
    waits: Waits = DEFAULT
    # rke2 controller: reads its API server's mirror pod (mirror_pod.py).
    mirror: Callable[[], MirrorView | str] | None = None
    _ahead: tuple[list[Step], queue.Queue[Message], RemoteSwap] | None = \
        field(default=None, init=False)
    _dropped: RemoteSwap | None = field(default=None, init=False)  # cancelled, not yet ended
    # A script whose host is back, kept (run's `keep`) for `finish`.
    _kept: tuple[queue.Queue[Message], RemoteSwap] | None = field(default=None, init=False)

    def preload(self, steps: list[Step]) -> None:
        """Send the script's head ahead, before the host's turn: sudo, the shell's start
        and the staging of the files are behind it by then. Nothing a reader of the
        host's files sees changes until `prepare`; `cancel` if it never comes."""
        messages: queue.Queue[Message] = queue.Queue()
        script = SwapScript.of(self.init, self.service, self.controller, steps,
                               stop_timeout=self.ready_timeout,
                               watch_seconds=self.ready_timeout + 30)
        swap = RemoteSwap(self.writer, script, 2 * self.ready_timeout + 60, messages.put,
                          Gate(), self.waits.silence)
        swap.start()
        self._ahead = (steps, messages, swap)

    def prepare(self, steps: list[Step], mark: str | None = None) -> None:
        """Begin the script sent ahead (sending it now if it was not preloaded), before
        the node is cordoned. Returns once it has staged the files and set the in-progress
        marker (`mark`, a shell command); it then waits for `run` to let it go. Raises
        RestartNotBegun (or a lost connection), with nothing stopped or changed but perhaps
        the marker set, when the host cannot. `cancel` if `run` never comes: the host then
        runs nothing more and removes what it staged."""
        if self._ahead is None:
            self.preload(steps)
        assert self._ahead is not None and self._ahead[0] is steps, "preloaded other steps"
        _, messages, swap = self._ahead
        swap.gate.begin(swap.script.begin(mark))
        deadline = self.clock() + self.ready_timeout
        while True:
            self._check_abort()
            try:
                message = messages.get(timeout=min(self.waits.abort_poll,
                                                   max(0.0, deadline - self.clock())))
            except queue.Empty:
                if self.clock() < deadline:
                    continue
                raise CommandTimeout(self.writer.label, f"the restart script did not begin "
                                     f"on the host within {self.ready_timeout:g} s") from None
            if isinstance(message, Marked):
                log.debug("%s: in-progress marker set", self.writer.label)
                return
            if isinstance(message, ScriptFailed):
                raise message.error
            if isinstance(message, ScriptEnded):
                raise RestartNotBegun(self.writer.label, f"the restart script failed before "
                                      f"the stop (exit {message.exit_code}): "
                                      f"{message.stderr or 'no message'}")

    def cancel(self, wait: float | None = None) -> None:
        """Drop a script sent ahead that was never let go (nothing once `run` took it).
        Its shell removes what it staged on its way out; this waits up to `wait` seconds
        (by default waits.cancel_wait) for that (see `wait_cancelled`)."""
        if self._ahead is not None:
            _, _, swap = self._ahead
            self._ahead = None
            swap.gate.cancel()
            self._dropped = swap
        self.wait_cancelled(self.waits.cancel_wait if wait is None else wait)

    def wait_cancelled(self, timeout: float) -> None:
        """Until the cancelled script has ended on the host (its staged files gone), or
        `timeout`: nothing it staged may outlive the host's part in the rollout, where the
        apply's clean-up would take it for a killed run's."""
        swap, self._dropped = self._dropped, None
        if swap is not None:
            if timeout > 0:
                swap.finished.wait(timeout)
            swap.stop()

    def run(self, steps: list[Step], written: list[Written], keep: bool = False) -> None:
        """`written` receives each file write or removal as the host reports it, so a
        caller rolling back knows what to restore even when this fails half-way. `keep`:
        once the host is back, its script is kept for `finish` (then `release` it)."""
        if not (self._ahead is not None and self._ahead[2].gate.begun):
            self.prepare(steps)
        assert self._ahead is not None and self._ahead[0] is steps, "prepared other steps"
        _, messages, swap = self._ahead
        self._ahead = None
        waiter = Waiter(self.writer, self.init, self.service, self.node, self.controller,
                        self.readyz, self.mirror)
        if self.mirror is not None:  # what the API server's pod was before the stop
            waiter.mirror_before = self.mirror()
        watch: list[Any] = []
        # The host stops the engine only while this apply's lock there is still ours.
        swap.gate.open(go_line(held_lock_id(self.writer)))
        back = False
        try:
            # The node is read and watched from the start on, while the engine starts: a
            # heartbeat is judged by the host's clock at the stop (Waiter), so what the node
            # said before needs no reading.
            self._follow(waiter, messages, steps, written, lambda until: watch.append(
                self._watch_node(until, messages.put)))
            back = True
        finally:
            if back and keep and swap.finishable:
                self._kept = (messages, swap)
            else:
                swap.stop()
            for watcher in watch:
                watcher.close()

    def finish(self, command: str, timeout: float | None = None) -> bool:
        """Run `command` (a shell command: the in-progress marker's removal) at the end of
        the script kept by `run`, on its connection; True once the host says it
        succeeded. False, having run it or not, when there is no such script (the
        connection was lost and dialled again meanwhile) or it failed: the caller then
        runs the command on its own. The script is released either way."""
        kept, self._kept = self._kept, None
        if kept is None:
            return False
        messages, swap = kept
        try:
            if not swap.finishable or not swap.gate.finish(finish(command)):
                return False
            deadline = self.clock() + (self.waits.cancel_wait if timeout is None else timeout)
            while True:
                try:
                    message = messages.get(timeout=max(0.0, deadline - self.clock()))
                except queue.Empty:
                    return False
                if isinstance(message, Cleared):
                    return message.exit_code == 0
                if isinstance(message, ScriptEnded | ScriptFailed):
                    return False
        finally:
            swap.stop()

    def release(self) -> None:
        """Stop reading a script kept by `run` (nothing if there is none)."""
        kept, self._kept = self._kept, None
        if kept is not None:
            kept[1].stop()

    def _follow(self, waiter: Waiter, messages: queue.Queue[Message], steps: list[Step],
                written: list[Written], start_watch: Callable[[float], None]) -> None:
        deadline: float | None = None  # from the start on
        readyz_from: float | None = None
        readyz_due = 0.0
        seen = "nothing yet"
        announced: set[str] = set()
        while True:
            if deadline is not None:
                # Once started: what the script wrote is all reported (a wait given up
                # earlier would leave the rollback without the files still being written).
                self._check_abort()
            # Before the start: the script's own lines (alive every second).
            wait = self.waits.abort_poll
            if deadline is not None:
                until = min(deadline, readyz_due) if readyz_from is not None else deadline
                wait = min(self.waits.abort_poll, max(0.0, until - self.clock()))
            try:
                message = messages.get(timeout=wait)
            except queue.Empty:
                message = None
            if message is not None:
                if self._take(message, waiter, steps, written, deadline is not None):
                    deadline = self.clock() + self.ready_timeout
                    start_watch(deadline)
            if deadline is None:
                continue
            now = self.clock()
            waiting = waiter.waiting_for(ask_readyz=now >= readyz_due)
            if waiting.startswith("API server:"):
                if readyz_from is None:
                    readyz_from = now
                if now >= readyz_due:  # it was asked just now: pace the next time
                    readyz_due = now + pause(now - readyz_from, self.waits.ready_poll_cap)
            else:
                readyz_from, readyz_due = None, 0.0
            if not waiting:
                self.note("back: new engine, fresh node status"
                          + (", API server ready" if self.controller and self.readyz else ""))
                return
            if not waiting.endswith(QUIET):  # nothing seen yet is nothing to say
                seen = waiting
                step = waiting.split(":", 1)[0]
                if step not in announced:
                    announced.add(step)
                    self.note(f"waiting: {waiting}")
            if self.clock() >= deadline:
                raise waiter.not_back(self.ready_timeout, seen)

    def _check_abort(self) -> None:
        if self.abort.is_set():
            raise RestartAborted(self.writer.label, "interrupted again: stopped waiting")

    def _take(self, message: Message, waiter: Waiter, steps: list[Step],
              written: list[Written], started: bool) -> bool:
        """Apply one message; True when it is the start (the wait for readiness begins)."""
        if isinstance(message, Probed):
            waiter.probed(message.name, message.state)  # a crash loop raises here
        elif isinstance(message, Stopped):
            waiter.stopped_at = message.at
            self.note(f"stopped {self.service}")
        elif isinstance(message, StepDone) and message.index < len(steps):
            step = steps[message.index]
            item = step.written(message.result)
            if item is not None:
                written.append(item)
            self.note(f"restored {message.result} file(s) from {step.path}"
                      if step.verb == "restored" and message.result.isdigit()
                      else f"{step.verb} {step.path}")
        elif isinstance(message, Started):
            self.note(f"started {self.service}, waiting until it is freshly back")
            return not started
        elif isinstance(message, NodeVersion):
            waiter.node_seen(api_shape.node(message.node, self.node))
        elif isinstance(message, NodeUnreadable):
            waiter.node_unreadable(message.why)
        elif isinstance(message, ScriptFailed):
            raise message.error
        elif isinstance(message, ScriptEnded):
            if message.exit_code in NOTHING_STOPPED and not written:
                raise NothingStopped(self.writer.label, f"the restart script gave up before "
                                     f"the stop (exit {message.exit_code}): "
                                     f"{message.stderr or 'no message'}; nothing was stopped")
            if message.exit_code not in (0, ABANDONED):
                raise CommandError(self.writer.label, f"remote command failed (exit "
                                   f"{message.exit_code}): {message.stderr or 'no message'}")
            if not started:
                raise CommandError(self.writer.label, "the restart script ended before it "
                                                      "started the engine")
            log.debug("%s: the host's watch of %s ended", self.writer.label, self.service)
        elif isinstance(message, Deadline):
            log.debug("%s: the host's watch of %s ran out of time", self.writer.label,
                      self.service)
        return False

    def _watch_node(self, until: float, push: Callable[[Message], None]) -> Any:
        def handle(event: WatchEvent) -> bool:
            if event.type == "SYNCED":
                items = event.object["items"]
                push(NodeVersion(items[0]) if items else NodeUnreadable("not found"))
            elif event.type == "DELETED":
                push(NodeUnreadable("deleted"))
            else:
                push(NodeVersion(event.object))
            return False  # watched until closed

        # The watch's own deadline is on time.monotonic's scale, whatever our clock is.
        limit = time.monotonic() + max(0.0, until - self.clock()) + 5
        watcher = node_watcher(self.api, self.node, handle,
                               lambda why: push(NodeUnreadable(why)), limit)

        def run() -> None:
            try:
                watcher.run("", limit)
            except ApiShapeError as exc:  # the rollout's thread decides: it rolls back
                push(ScriptFailed(exc))

        threading.Thread(target=run, daemon=True, name=f"cargoship-watch-{self.node}").start()
        return watcher
