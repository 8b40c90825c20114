"""7. Sync Registry Config Controller: controllers whose engine config drifted are drained,
stopped, written, started and uncordoned, one at a time; chart values are written in place.

A mutating phase: a dry run reports it and never runs it (the default declaration), but
assesses it read-only against the live hosts.
"""

from __future__ import annotations

from .sync_common import SyncRolePhase


class SyncControllers(SyncRolePhase):
    title = "Sync Registry Config Controller"
    role = "controller"
