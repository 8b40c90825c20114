"""An engine restart with a change, followed as it happens.

One remote script (swap_script.py) stops the engine, changes the files, starts the engine
and then reports its state from the host; the node's status arrives through the API's
watch (watch.py); readiness.Waiter judges, at every event, whether the host is back. The
script runs in a thread of its own (swap_runner.py, which also says what a lost
connection does) and so does the watch: both hand their events to one queue
(restart_messages.py), which the loop of restart_follow.py reads. Restart, here, sends the
script ahead, lets it go at the host's turn, and ends it.
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from planner.errors import CommandError, CommandTimeout

from .file_writes import Written
from .host_lock import held_lock_id
from .mirror_pod import MirrorView
from .readiness import APISERVER_MANIFEST, Waiter
from .restart_follow import RestartFollower
from .restart_messages import Message, ScriptEnded, ScriptFailed
from .swap_output import Cleared, Marked
from .swap_runner import Gate, RemoteSwap
from .swap_script import THERE, SwapScript, finish, go_line
from .swap_steps import Step

log = logging.getLogger("cargoship.executor")


class RestartNotBegun(CommandError):
    """The restart script ended before its GO (a file's staging or the marker failed):
    it never reached the stop, so the engine runs on and no file changed."""


@dataclass
class Restart(RestartFollower):
    """Stop, change and start one host's engine, and wait until it is freshly back."""

    # rke2 controller: reads its API server's mirror pod (mirror_pod.py).
    mirror: Callable[[], MirrorView | str] | None = None
    # ... and its static pod manifest, under the engine's data-dir.
    apiserver_manifest: str = APISERVER_MANIFEST
    undoing: bool = False  # a rollback (readiness.Waiter's `undoing`)
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
                               watch_seconds=self.ready_timeout + 30,
                               where=replace(THERE, apiserver_manifest=self.apiserver_manifest))
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
                        self.readyz, self.mirror, undoing=self.undoing)
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
                self._watch_node(until, messages.put)), swap.script.start_within)
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
