"""The executor's view of a host: everything the planner's HostReader can do, plus running
commands that change the host, as root. Only executor steps get one of these.

A dropped SSH connection in the middle of a rollout must not strand a host half-done, so a
writer that knows how to dial its host again (`redial`) reconnects when a command loses its
connection or gets no answer, and runs the command again. That is safe because every
script the executor runs is idempotent: running it twice leaves the host as running it
once does (file_writes.py keeps the first backup; lock scripts recognise their own lock; `sv up`
and `sv down` are idempotent). A reconnection checks the host key exactly as the first
connection did.
"""

from __future__ import annotations

import logging
import shlex
import threading
import time
from collections.abc import Callable

from planner.errors import CommandError, CommandTimeout, ConnectError, ConnectionLost, HostKeyError
from planner.hosts.reader import HostReader
from planner.hosts.ssh import CommandResult, OnStdout, SshSession

log = logging.getLogger("cargoship.executor")

# How many times one command is re-run after a reconnection; a host whose connection drops
# every time is not one to keep changing.
MAX_RERUNS = 3


class HostWriter(HostReader):
    def __init__(self, session: SshSession, user: str, command_timeout: float, *,
                 redial: Callable[[], SshSession] | None = None,
                 reconnect_within: float = 30.0) -> None:
        super().__init__(session, user, command_timeout)
        self._writer_session = session
        self._command_timeout = command_timeout
        self._redial = redial
        self._reconnect_within = reconnect_within
        self._dial_lock = threading.Lock()
        self._generation = 0  # bumped by each reconnection, so threads reconnect only once
        self.reconnections = 0
        # Set once a whole reconnect window passed without a connection: each later command
        # (a rollback's steps, the apply record) then dials once, not for a window each,
        # so a host that is gone costs one window and a dial per step, not a window per step.
        self._unreachable = False

    def run_root(self, script: str, *, stdin: bytes | None = None,
                 timeout: float | None = None, check: bool = True) -> CommandResult:
        """Run a POSIX sh script as root (through `sudo -n` for a non-root user).

        Every value in `script` must already be quoted (planner.hosts.batch.quote); data
        goes through `stdin`. The script must be idempotent (see the module docstring).
        With `check`, a non-zero exit raises CommandError carrying the script's first line
        of stderr.
        """
        command = "sh -c " + shlex.quote(script)
        if self.user != "root":
            command = "sudo -n -- " + command
        reruns = 0
        while True:
            session, generation = self._writer_session, self._generation
            try:
                result = session.run(command, timeout or self._command_timeout, stdin)
                break
            except (ConnectionLost, CommandTimeout) as exc:
                if self._redial is None or reruns >= MAX_RERUNS:
                    raise
                reruns += 1
                self._reconnect(generation, exc)
        if check and result.exit_code != 0:
            first = result.stderr.decode("utf-8", "replace").strip().splitlines()[:1]
            raise CommandError(self.label, f"remote command failed (exit {result.exit_code})"
                                           f": {first[0][:300] if first else 'no message'}")
        return result

    def stream_root(self, script: str, on_stdout: OnStdout, timeout: float,
                    hold: Callable[[], bytes | None] | None = None) -> CommandResult:
        """Run a long POSIX sh script as root, handing its stdout to `on_stdout` as it
        arrives (see SshSession.run). The script goes to `sh -s` on stdin, so it may carry
        file content (secrets included) without it ever being on a command line; `hold`
        may keep back its end (SshSession.run). Never run again on its own: a lost
        connection is raised, and the caller, who knows how far the script got, calls
        `reconnect` and decides what to run next."""
        command = "sh -s" if self.user == "root" else "sudo -n -- sh -s"
        return self._writer_session.run(command, timeout, script.encode(), on_stdout, hold)

    def reconnect(self, cause: CommandError) -> None:
        """Dial the host again after `cause` (a lost connection or an unanswered command);
        ConnectionLost when this writer cannot redial."""
        if self._redial is None:
            raise cause
        self._reconnect(self._generation, cause)

    def _reconnect(self, generation: int, cause: CommandError) -> None:
        assert self._redial is not None
        with self._dial_lock:
            if self._generation != generation:
                return  # another thread already reconnected while this one waited
            log.warning("%s: %s; reconnecting", self.label, cause.message)
            self._writer_session.close()
            once = self._unreachable
            deadline = time.monotonic() + (0.0 if once else self._reconnect_within)
            while True:
                try:
                    session = self._redial()
                    break
                except HostKeyError:
                    raise  # never carry on with a host that is not the one planned against
                except ConnectError as exc:
                    if time.monotonic() >= deadline:
                        self._unreachable = True
                        window = f"{self._reconnect_within:g}s"
                        why = (f"reconnecting failed again (one try: no connection within "
                               f"the {window} reconnect window before)") if once else \
                            f"reconnecting failed for {window}"
                        raise ConnectionLost(self.label, f"{cause.message}, and {why}: "
                                                         f"{exc.message}") from None
                    # A restarting sshd refuses at once: pace the attempts.
                    time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
            self._unreachable = False
            self._writer_session = self._session = session
            self._generation += 1
            self.reconnections += 1
            log.warning("%s: reconnected; running the interrupted command again", self.label)

    def reader(self) -> HostReader:
        """A read-only view over this writer's connection, for planner code (the drift
        check's dry run), which may hold readers only."""
        return HostReader(self._writer_session, self.user, self._command_timeout)

    def close(self) -> None:
        self._writer_session.close()
