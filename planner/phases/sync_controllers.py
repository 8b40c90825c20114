"""Sync Registry Config Controller: Controllers whose engine config drifted: drain, stop, write,
start, uncordon, one at a time; chart values in place.

A mutating phase: a dry run reports it and never runs it (the default declaration).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..context import HostState, PlanContext
from .base import Phase, Resource
from .sync_common import assess_role, sync_reads


class SyncControllers(Phase):
    title = "Sync Registry Config Controller"

    def reads(self, ctx: PlanContext, host: HostState) -> frozenset[str]:
        return sync_reads(ctx, host) if host.config.role == "controller" else frozenset()

    def assess(self, ctx: PlanContext, hosts: Sequence[HostState]) -> set[Resource]:
        return assess_role(ctx, self.title, "controller", hosts)
