"""What the rollout is given for one host (HostJob) and what it says of it (HostOutcome),
and how an error shows in an outcome: one line (as_error)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from planner.desired.engine_files import DesiredFile
from planner.errors import CargoshipError

from .mirror_pod import MirrorView
from .readiness import APISERVER_MANIFEST
from .remote import HostWriter


def as_error(exc: BaseException) -> Exception:
    """An exception as it is shown in one line: ours and OSErrors as they are, anything
    else (a bug, a malformed answer nobody expected) with its type, never a traceback."""
    if isinstance(exc, CargoshipError | OSError):
        return exc
    return CargoshipError(f"unexpected {type(exc).__name__}: {exc}")


@dataclass
class HostJob:
    label: str
    node: str
    writer: HostWriter
    init: str
    service: str
    files: list[DesiredFile] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)
    restart: bool = False
    # Cordoned and drained before the restart: what the plan said for its changes
    # (options.drain.when); a restart without it leaves the node's containers running.
    drain: bool = False
    controller: bool = False
    # A controller's own API server: (ready, why not) from its /readyz.
    readyz: Callable[[], tuple[bool, str]] | None = None
    # restore-backup: put back the files an interrupted apply backed up here, then restart.
    restore_from: str | None = None
    # The host's own addresses: its node's InternalIP must be one (node_identity.py).
    addresses: frozenset[str] = frozenset()
    # rke2 controller: reads its API server's mirror pod (mirror_pod.py).
    mirror: Callable[[], MirrorView | str] | None = None
    # rke2 controller: its API server's static pod manifest, under the engine's data-dir.
    apiserver_manifest: str = APISERVER_MANIFEST


@dataclass(frozen=True)
class HostOutcome:
    host: str
    status: str  # "applied", "rolled back", "failed", "not started"
    detail: str = ""
    restarts: int = 0  # engine starts asked for on the host: the change's and a rollback's
    # The host's log lines since the restart that failed (shown under the detail, indented).
    log: tuple[str, ...] = ()
    # What the host is left with, when its detail says more than that (a failed rollback):
    # the end of an apply lists it for every host.
    left: str = ""
