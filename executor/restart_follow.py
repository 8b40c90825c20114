"""Following a restart as it happens: each message on the restart's queue (the script's
events, its end, the node from the API's watch) is taken into readiness.Waiter, which
judges at every one whether the host is freshly back (a crash loop raises as soon as it
is seen), until it is or the ready timeout is over. Only a controller's /readyz is asked
at intervals. Restart (restart.py) is a RestartFollower that also runs the script."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from planner.errors import CommandError, CommandTimeout
from planner.hosts.ssh import ABANDONED
from planner.safetext import decimal
from planner.threads import start

from . import api_shape
from .api_shape import ApiShapeError
from .file_writes import Written
from .host_lock import UNSAFE, WAIT_TIMEOUT
from .polling import pause
from .readiness import Waiter
from .remote import HostWriter
from .restart_messages import (
    Message,
    NodeUnreadable,
    NodeVersion,
    Rerun,
    ScriptEnded,
    ScriptFailed,
)
from .swap_output import Deadline, Probed, Started, StepDone, Stopped
from .swap_script import GONE, NOT_HELD
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


# What the host lacks while nothing has been seen of it yet (see Waiter.waiting_for).
QUIET = ("not seen yet", "nothing seen yet", "not asked yet")


@dataclass
class _Watching:
    """What the wait for readiness keeps between its looks: the API server's /readyz
    pacing, the last thing the host lacked, the steps already announced."""

    readyz_from: float | None = None  # when /readyz was first what the host lacked
    readyz_due: float = 0.0
    seen: str = "nothing yet"
    announced: set[str] = field(default_factory=set)


@dataclass
class RestartFollower:
    """One host's engine as it restarts: which it is, how long it may take to come back,
    whom to tell, and the loop that waits for it."""

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
    # A fresh read of the node (a quorum read, through whichever controller's API server
    # answers), taken every waits.fresh_node_every besides the watch; None: the watch only.
    fresh_node: Callable[[], Any] | None = None
    # How far the host got, for whoever must say what a failure left there: how many of
    # the steps it reported done (they run in order), and whether it started the engine.
    steps_done: int = field(default=0, init=False)
    engine_started: bool = field(default=False, init=False)

    def _follow(self, waiter: Waiter, messages: queue.Queue[Message], steps: list[Step],
                written: list[Written], start_watch: Callable[[float], None],
                start_within: float | None = None) -> None:
        """`start_within`: seconds the script, let go, has to start the engine (again after
        each rerun); a keepalive says only that the script lives, not that it gets on."""
        deadline: float | None = None  # from the start on
        go_by = None if start_within is None else self.clock() + start_within
        watching = _Watching()
        while True:
            if deadline is not None:
                # Once started: what the script wrote is all reported (a wait given up
                # earlier would leave the rollback without the files still being written).
                self._check_abort()
            try:
                message = messages.get(timeout=self._poll(deadline, go_by, watching))
            except queue.Empty:
                message = None
            if isinstance(message, Rerun):
                if deadline is None and start_within is not None:
                    go_by = self.clock() + start_within
            elif message is not None:
                if self._take(message, waiter, steps, written, deadline is not None):
                    deadline = self.clock() + self.ready_timeout
                    start_watch(deadline)
            if deadline is None:
                if go_by is not None and self.clock() >= go_by:
                    raise CommandTimeout(self.writer.label, f"the restart script did not start "
                                         f"{self.service} within {start_within:g} s, though "
                                         f"it said it was alive: stuck on the host")
                continue
            if self._back(waiter, watching, deadline):
                return

    def _poll(self, deadline: float | None, go_by: float | None,
              watching: _Watching) -> float:
        """How long the next wait for a message may be: the abort poll at most; once
        started, no later than the deadline or the next /readyz; before, than `go_by`."""
        wait = self.waits.abort_poll  # before the start: the script's own lines, every second
        if deadline is not None:
            until = min(deadline, watching.readyz_due) if watching.readyz_from is not None \
                else deadline
            return min(wait, max(0.0, until - self.clock()))
        if go_by is not None:
            return min(wait, max(0.0, go_by - self.clock()))
        return wait

    def _back(self, waiter: Waiter, watching: _Watching, deadline: float) -> bool:
        """One look, once the engine started: True when the host is back; what it still
        lacks said once per step; NotBackError past the deadline."""
        now = self.clock()
        waiting = waiter.waiting_for(ask_readyz=now >= watching.readyz_due)
        if waiting.startswith("API server:"):
            if watching.readyz_from is None:
                watching.readyz_from = now
            if now >= watching.readyz_due:  # it was asked just now: pace the next time
                watching.readyz_due = now + pause(now - watching.readyz_from,
                                                  self.waits.ready_poll_cap)
        else:
            watching.readyz_from, watching.readyz_due = None, 0.0
        if not waiting:
            self.note("back: new engine, fresh node status"
                      + (", API server ready" if self.controller and self.readyz else ""))
            return True
        if not waiting.endswith(QUIET):  # nothing seen yet is nothing to say
            watching.seen = waiting
            step = waiting.split(":", 1)[0]
            if step not in watching.announced:
                watching.announced.add(step)
                self.note(f"waiting: {waiting}")
        if self.clock() >= deadline:
            raise waiter.not_back(self.ready_timeout, watching.seen)
        return False

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
            self.steps_done = max(self.steps_done, message.index + 1)  # in order; a rerun's again
            item = step.written(message.result)
            if item is not None:
                written.append(item)
            self.note(f"restored {message.result} file(s) from {step.path}"
                      if step.verb == "restored" and decimal(message.result) is not None
                      else f"{step.verb} {step.path}")
        elif isinstance(message, Started):
            self.engine_started = True
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

        start(run, name=f"cargoship-watch-{self.node}")
        fresh = self.fresh_node
        if fresh is not None:
            # The watch is served from one API server's cache, which its own etcd member
            # feeds: a member that hangs leaves it silent, not broken.
            def look() -> None:
                while not watcher.wait_closed(self.waits.fresh_node_every):
                    try:
                        push(NodeVersion(fresh()))
                    except ApiShapeError as exc:  # as from the watch: the rollout decides
                        push(ScriptFailed(exc))
                        return
                    except Exception as exc:  # noqa: BLE001 - the watch still speaks
                        log.debug("%s: a fresh read of node %s: %s", self.writer.label,
                                  self.node, exc)

            start(look, name=f"cargoship-read-{self.node}")
        return watcher
