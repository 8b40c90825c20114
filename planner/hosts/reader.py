"""The planner's read-only view of a host.

Planner phases only ever get a HostReader: it can gather facts (read-only snippets written
in planner code, never user text) and nothing else. Writing is the executor's business,
through an interface the planner does not have.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from ..errors import CommandError
from .batch import Batch, Fact, FactParseError, Output, Sections, quote
from .snapshot import Snapshot, SnapshotScript
from .ssh import CommandResult, Session

log = logging.getLogger("cargoship.planner")


class HostReader:
    def __init__(self, session: Session, user: str, command_timeout: float) -> None:
        self._session = session
        self.user = user
        self.label = session.label
        self.host_key_fingerprint = session.host_key_fingerprint
        self._timeout = command_timeout

        self._snapshot: Snapshot | None = None
        # This machine's clock (time.time) around the read that answered the last gather:
        # a host's clock is compared with the moment it was read, not when it was parsed.
        self.read_window = (0.0, 0.0)

    @property
    def round_trips(self) -> int:
        return self._session.round_trips

    def take_snapshot(self, facts: Sequence[tuple[Fact[Any], bool]]) -> None:
        """Read every fact the plan's phases will ask for, in one exec (see snapshot.py).
        A snapshot that fails is dropped: each phase then reads for itself, and fails
        with its own message."""
        script, command, started = self._snapshot_command(facts)
        try:
            result = self._session.run(command, self._timeout, sink=script.sink())
        except CommandError as exc:
            log.debug("%s: no snapshot (%s); phases read for themselves", self.label, exc)
            return
        self._keep(script, len(facts), started, result)

    def start_snapshot(self, facts: Sequence[tuple[Fact[Any], bool]]) -> Future[None] | None:
        """take_snapshot without waiting, where the session can run a command so (a
        plan's libssh2 session): the future is done once the snapshot is kept or dropped.
        None where the session can only run it blocking."""
        submit = getattr(self._session, "submit", None)
        if submit is None:
            return None
        script, command, started = self._snapshot_command(facts)
        settled: Future[None] = Future()

        def landed(job: Future[CommandResult]) -> None:
            try:
                exc = job.exception()
                if exc is None:
                    self._keep(script, len(facts), started, job.result())
                else:
                    log.debug("%s: no snapshot (%s); phases read for themselves",
                              self.label, exc)
            finally:
                settled.set_result(None)

        submit(command, self._timeout, script.sink()).add_done_callback(landed)
        return settled

    def _snapshot_command(self, facts: Sequence[tuple[Fact[Any], bool]],
                          ) -> tuple[SnapshotScript, str, float]:
        script = SnapshotScript.of(facts, sudo=self.user != "root")
        # Half the command's time for an earlier run's restart to finish its files.
        return script, script.command(wait=int(self._timeout // 2)), time.time()

    def _keep(self, script: SnapshotScript, count: int, started: float,
              result: CommandResult) -> None:
        try:
            snapshot = script.split(result.stdout.decode("utf-8", errors="replace"),
                                    result.stderr.decode("utf-8", errors="replace"))
        except FactParseError as exc:
            log.debug("%s: no snapshot (%s); phases read for themselves", self.label, exc)
            return
        snapshot.started, snapshot.finished = started, time.time()
        if snapshot.lock_note:
            log.debug("%s: %s; read anyway (the drift check at apply stands guard)",
                      self.label, snapshot.lock_note)
        log.debug("%s: snapshot of %d fact(s) in %.0f ms", self.label, count,
                  (snapshot.finished - started) * 1000)
        self._snapshot = snapshot

    def answered(self, facts: Sequence[Fact[Any]], *, as_root: bool = False) -> bool:
        """Whether gather() answers these from the snapshot, with no round trip."""
        snapshot = self._snapshot
        if snapshot is None:
            return False
        if as_root and self.user != "root" and snapshot.root_error is not None:
            return True  # refused at once, from the snapshot
        return snapshot.answer(facts, as_root) is not None

    def gather(self, facts: Sequence[Fact[Any]], *, as_root: bool = False) -> list[Any]:
        """Every fact's parsed value, in order: from the snapshot when it has them all,
        else in one round trip of their own.

        `as_root` runs the batch through `sudo -n` when the SSH user is not root; a host
        without passwordless sudo then fails with a CommandError saying so.
        """
        if self._snapshot is not None:
            if as_root and self.user != "root" and self._snapshot.root_error is not None:
                raise CommandError(self.label, f"sudo -n failed for user {self.user}: "
                                               f"{self._snapshot.root_error}")
            outputs = self._snapshot.answer(facts, as_root)
            if outputs is not None:
                self.read_window = (self._snapshot.started, self._snapshot.finished)
                return self._parse(facts, outputs)
            log.debug("%s: %s not in the snapshot: a round trip of its own", self.label,
                      ", ".join(f.name for f in facts))
        batch = Batch.of(facts)
        command = "sh -c " + quote(batch.script())
        if as_root and self.user != "root":
            command = "sudo -n -- " + command
        started = time.time()
        result = self._session.run(command, self._timeout, sink=Sections(batch.sections()))
        self.read_window = (started, time.time())
        log.debug("%s: %d fact(s) in %.0f ms", self.label, len(facts),
                  (self.read_window[1] - started) * 1000)
        stdout = result.stdout.decode("utf-8", errors="replace")
        if as_root and self.user != "root" and result.exit_code != 0 and not stdout:
            raise CommandError(self.label, f"sudo -n failed for user {self.user}: "
                                           f"{_first_line(result.stderr)}")
        try:
            outputs = batch.split(stdout)
        except FactParseError as exc:
            names = ", ".join(f.name for f in facts)
            raise CommandError(self.label, f"unexpected output reading {names}: {exc}") from None
        return self._parse(facts, outputs)

    def _parse(self, facts: Sequence[Fact[Any]], outputs: Sequence[Output]) -> list[Any]:
        try:
            return [fact.parse(out) for fact, out in zip(facts, outputs, strict=True)]
        except FactParseError as exc:
            names = ", ".join(f.name for f in facts)
            raise CommandError(self.label, f"unexpected output reading {names}: {exc}") from None

    def close(self) -> None:
        self._session.close()


def _first_line(data: bytes) -> str:
    text = data.decode("utf-8", errors="replace").strip()
    return text.splitlines()[0][:200] if text else "no output"
