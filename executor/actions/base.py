"""The handler protocol and what every handler is given.

A handler runs in one of two stages, declared by its class, never by the phase that
planned its changes:
    hosts    the rollout: a host's changes become one job (drain and restart when any of
             them needs it), controllers one at a time, workers in a sliding window
    cluster  after a rollout that left every host applied: steps that need the cluster
             back in service (the Kubernetes API, the admin kubeconfig)
"""

from __future__ import annotations

import socket
import threading
import urllib.parse
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from planner.api_server import host_address, server_for
from planner.config.model import ClusterConfig
from planner.context import HostState, PlanContext
from planner.desired.engine_files import DesiredFile
from planner.errors import CargoshipError
from planner.kube import admin_kubeconfig_path, parse_admin, with_server
from planner.plan.model import Change, HostRef, Plan, Unassessed

from ..host_job import HostJob
from ..readiness import point_at
from ..remote import HostWriter
from ..waits import DEFAULT, Waits

Progress = Callable[[str, str], None]
Item = Change | Unassessed
ItemStatus = Literal["done", "unchanged", "failed", "not done"]
Stage = Literal["hosts", "cluster"]


class ApplyRefused(CargoshipError):
    """The plan can't be applied as it is; nothing was changed. The message is the deciding
    reason; `details`, the others, one line each (shown as a short list under it)."""

    def __init__(self, message: str, details: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.details = tuple(details)


@dataclass(frozen=True)
class ItemResult:
    item: Item
    status: ItemStatus
    detail: str = ""


@dataclass
class ApplyEnv:
    """The live cluster as apply holds it: fresh host facts, a writer per host, locks."""

    plan: Plan
    config: ClusterConfig
    ctx: PlanContext
    writers: dict[tuple[str, int], HostWriter]
    progress: Progress
    locks_lost: Callable[[], set[str]] = set
    stop: threading.Event = field(default_factory=threading.Event)
    # Called on a second interrupt (signals.py): the rollout adds its own.
    escalations: list[Callable[[], None]] = field(default_factory=list)
    waits: Waits = DEFAULT
    _api: Any = None
    _admin: dict[str, Any] | None = None

    def host(self, ref: HostRef) -> HostState:
        return next(h for h in self.ctx.hosts if h.ref.key == ref.key)

    def admin(self) -> dict[str, Any] | None:
        """The admin kubeconfig of the first controller whose API server answers, read now
        (a restart may have rewritten it). The first controller's may be down: it may be
        the very host an interrupted apply left stopped."""
        found: dict[str, Any] | None = None
        for host in self.ctx.hosts:
            if host.config.role != "controller":
                continue
            path = admin_kubeconfig_path(self.config.engine.distro)
            writer = self.writers[host.ref.key]
            admin = parse_admin(writer.run_root(f"cat {path}").stdout.decode())
            admin = with_server(admin, server_for(self.ctx, host, admin)[0])
            if _answers(admin):
                return admin
            found = found or admin  # none answers: the first one's errors say why
        return found

    def api(self) -> Any | None:
        if self._api is None:
            self._admin = self.admin()
            self._api = self.ctx.kube_api(self._admin) if self._admin else None
        return self._api

    def other_apis(self) -> list[Any]:
        """Every other controller's own API server (the address its certificate covers,
        as readiness asks it), for requests the first cannot carry: api()'s server
        first if it is one of them, so it is not asked twice."""
        if self.api() is None or self._admin is None:
            return []
        first = urllib.parse.urlsplit(str(self._admin["clusters"][0]["cluster"]["server"]))
        others = []
        for host in self.ctx.hosts:
            if host.config.role != "controller":
                continue
            admin = point_at(self._admin, host_address(host))
            server = urllib.parse.urlsplit(str(admin["clusters"][0]["cluster"]["server"]))
            if (server.hostname, server.port) != (first.hostname, first.port):
                others.append(self.ctx.kube_api(admin))
        return others


def _answers(admin: dict[str, Any]) -> bool:
    """Whether the API server the kubeconfig points at accepts a connection (2 s)."""
    server = urllib.parse.urlsplit(str(admin["clusters"][0]["cluster"].get("server", "")))
    try:
        with socket.create_connection((server.hostname or "", server.port or 443), timeout=2):
            return True
    except OSError:
        return False


class Handler(ABC):
    action: ClassVar[str]
    stage: ClassVar[Stage]
    # Can it assess and carry out, at apply time, an item the plan could not assess?
    finishes_unassessed: ClassVar[bool] = False


class HostHandler(Handler):
    """A change made to one host during the rollout: it shapes that host's job."""

    stage: ClassVar[Stage] = "hosts"

    @abstractmethod
    def shape(self, job: HostJob, change: Change, wanted: dict[str, DesiredFile]) -> None:
        """Add this change to the host's job; raise ApplyRefused if it can't be made."""


class ClusterHandler(Handler):
    stage: ClassVar[Stage] = "cluster"

    @abstractmethod
    def run(self, items: Sequence[Item], env: ApplyEnv) -> list[ItemResult]:
        """Carry out the planned changes (and unassessed items) of this action."""
