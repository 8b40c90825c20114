"""The one fake cluster the unit tests of apply's rollout and rollback logic share: SSH
sessions (and a factory of them, as `executor.apply.apply(sessions=...)` takes), a node
API, and a restart whose host does what a test says. The lab (tests/e2e,
tests/reliability) runs the real ones; these pin the decisions taken on their outcomes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from executor.drain_pods import DrainOptions, DrainReport
from executor.file_writes import Written
from executor.host_job import HostJob
from executor.remote import HostWriter
from executor.restart_follow import NothingStopped
from executor.rollout import Rollout
from executor.swap_steps import Step
from planner.config.model import SshConfig
from planner.errors import CargoshipError, ConnectError, ConnectionLost
from planner.hosts.ssh import CommandResult, ConnectOptions


class FakeSession:
    """An SSH session whose commands succeed (stdout `ok`) unless `behaviour` says
    otherwise: each command takes the next entry, an exception to raise or None."""

    def __init__(self, behaviour: list[Exception | None] | None = None,
                 key: str = "SHA256:k", label: str = "wrk-1") -> None:
        self.label = label
        self.user = "root"
        self.host_key_fingerprint = key
        self.round_trips = 0
        self.behaviour = behaviour if behaviour is not None else []
        self.closed = False
        self.commands: list[str] = []

    def run(self, command: str, timeout: float, stdin: bytes | None = None,
            *_: Any) -> CommandResult:
        if self.closed:  # as a real SshSession: a closed one runs nothing
            raise ConnectionLost(self.label, "SSH connection is closed")
        self.commands.append(command)
        self.round_trips += 1
        failure = self.behaviour.pop(0) if self.behaviour else None
        if failure:
            raise failure
        return CommandResult(0, b"ok", b"")

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeSessions:
    """A session factory (executor.connect.SessionFactory): each host's session has the
    key `keys` gives it (default SHA256:k); a host in `down` refuses the connection."""

    keys: dict[str, str] = field(default_factory=dict)
    down: set[str] = field(default_factory=set)
    opened: list[FakeSession] = field(default_factory=list)

    def __call__(self, label: str, ssh: SshConfig, options: ConnectOptions,
                 pinned: str | None) -> FakeSession:
        if label in self.down:
            raise ConnectError(label, f"cannot connect to {ssh.address}:{ssh.port or 22}: "
                                      "connection refused")
        session = FakeSession(key=self.keys.get(label, "SHA256:k"), label=label)
        self.opened.append(session)
        return session


def writer(session: FakeSession | None = None, dial: Callable[[], FakeSession] | None = None,
           within: float = 0.5) -> HostWriter:
    """A real HostWriter over a fake session; `dial` opens the next one (reconnecting)."""
    return HostWriter(session or FakeSession(), "root", 5,  # type: ignore[arg-type]
                      redial=dial, reconnect_within=within)  # type: ignore[arg-type]


class FakeNodeOps:
    """The node API as the rollout uses it (executor.drain.NodeOps): every call recorded
    in `calls`; `operator_cordoned` nodes were cordoned before cargoship came; a node in
    `drain_fails` fails its drain, one in `uncordon_fails` its uncordon."""

    def __init__(self, *, operator_cordoned: set[str] | None = None,
                 drain_fails: set[str] | None = None,
                 uncordon_fails: set[str] | None = None) -> None:
        self.operator_cordoned = operator_cordoned or set()
        self.drain_fails = drain_fails or set()
        self.uncordon_fails = uncordon_fails or set()
        self.calls: list[tuple[str, str]] = []
        self.warmed: list[int] = []
        self._lock = threading.Lock()

    def _call(self, what: str, node: str) -> None:
        with self._lock:
            self.calls.append((what, node))

    def read_node(self, node: str) -> dict[str, Any]:
        return {"metadata": {"name": node}, "status": {"addresses": [
            {"type": "InternalIP", "address": f"10.0.0.{sum(map(ord, node)) % 250 + 1}"}]}}

    def cordon(self, node: str, owner: str = "cargoship", read: Any = None) -> bool:
        self._call("cordon", node)
        return node not in self.operator_cordoned

    def drain(self, node: str, options: DrainOptions, *, cordoned: bool = False,
              then: Callable[[], None] | None = None,
              note: Callable[[str], None] | None = None) -> DrainReport:
        self._call("drain", node)
        if node in self.drain_fails:
            raise CargoshipError(f"node {node}: pod ns/p could not be evicted")
        if then is not None:
            then()
        return DrainReport((), ())

    def uncordon(self, node: str) -> None:
        self._call("uncordon", node)
        if node in self.uncordon_fails:
            raise CargoshipError(f"node {node}: uncordon refused")

    def uncordon_retrying(self, node: str, timeout: float,
                          retrying: Callable[[Exception], None]) -> None:
        self.uncordon(node)

    def warm(self, count: int) -> None:
        self.warmed.append(count)

    def interrupt(self) -> None:
        pass

    @property
    def api(self) -> None:
        return None

    def uncordoned(self) -> list[str]:
        return [node for what, node in self.calls if what == "uncordon"]


class FakeRestart:
    """One host's restart script (executor.restart.Restart) whose host does what the
    test said: "back" (the engine came back fresh), "not back" (stopped, files written,
    never back: the rollout rolls back), "refused" (ended before the stop, nothing
    stopped), "rollback fails" (as "not back", and its rollback's restart fails too,
    before the host restored anything), or "rollback not back" (as "not back", and its
    rollback restores every file and starts the engine, which does not come back).
    A rollback's restart is a FakeRestart of its own, recorded in `rollbacks`."""

    def __init__(self, outcome: str, *, rollback: bool = False) -> None:
        self.outcome = outcome
        self.rollback = rollback
        self.preloaded = self.prepared = self.cancelled = self.released = False
        self.ran: list[list[Step]] = []
        self.steps_done = 0
        self.engine_started = False

    def preload(self, steps: list[Step]) -> None:
        self.preloaded = True

    def prepare(self, steps: list[Step], mark: str | None = None) -> None:
        self.prepared = True

    def run(self, steps: list[Step], written: list[Written], keep: bool = False) -> None:
        self.ran.append(steps)
        if self.rollback:
            if self.outcome == "rollback fails":
                raise CargoshipError("the host said nothing for 15 s: connection lost")
            if self.outcome == "rollback not back":
                self.steps_done, self.engine_started = len(steps), True
                raise CargoshipError("rke2-server is crash-looping")
            return
        if self.outcome == "refused":
            raise NothingStopped("wrk", "the host lock is not this apply's; nothing was "
                                        "stopped")
        written.append(Written("/etc/engine/config.yaml", "/backup/config.yaml"))
        if self.outcome in ("not back", "rollback fails", "rollback not back"):
            raise CargoshipError("the engine did not come back within 8 s")

    def cancel(self, wait: float | None = None) -> None:
        """As the real one: nothing once `run` took the script."""
        if not self.ran:
            self.cancelled = True

    def wait_cancelled(self, timeout: float) -> None:
        pass

    def finish(self, command: str, timeout: float | None = None) -> bool:
        return True

    def release(self) -> None:
        self.released = True


class FakeRollout(Rollout):
    """The real rollout (order, window, rollback, uncordon) over FakeNodeOps and
    FakeRestarts: `outcomes` says how each host's restart goes (default "back")."""

    def __init__(self, outcomes: dict[str, str] | None = None,
                 ops: FakeNodeOps | None = None) -> None:
        super().__init__(ops or FakeNodeOps(), "plan-1", DrainOptions(), 8.0,  # type: ignore[arg-type]
                         self._record)
        self.outcomes = outcomes or {}
        self.restarts: dict[str, list[FakeRestart]] = {}
        self.notes: list[tuple[str, str]] = []

    def _record(self, host: str, what: str) -> None:
        self.notes.append((host, what))

    def _restart(self, job: HostJob, *, rollback: bool = False) -> FakeRestart:  # type: ignore[override]
        restart = FakeRestart(self.outcomes.get(job.label, "back"), rollback=rollback)
        self.restarts.setdefault(job.label, []).append(restart)
        return restart


def restarting(*names: str, controller: bool = False) -> list[HostJob]:
    """Jobs that change a file the engine reads at start, on fake hosts."""
    return [HostJob(n, n, writer(FakeSession(label=n)), "runit", "svc", restart=True, drain=True,
                    controller=controller,
                    addresses=frozenset({f"10.0.0.{sum(map(ord, n)) % 250 + 1}"}))
            for n in names]
