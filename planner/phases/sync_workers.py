"""8. Sync Registry Config Worker: workers whose engine config drifted are drained, stopped,
written, started and uncordoned, up to the worker concurrency at a time.

A mutating phase: a dry run reports it and never runs it (the default declaration), but
assesses it read-only against the live hosts.
"""

from __future__ import annotations

from .sync_common import SyncRolePhase


class SyncWorkers(SyncRolePhase):
    title = "Sync Registry Config Worker"
    role = "worker"
