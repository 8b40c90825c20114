"""Sync Registry Config Worker: Workers whose engine config drifted: drain, stop, write, start,
uncordon, up to the worker concurrency.

A mutating phase: a dry run reports it and never runs it (the default declaration).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..context import HostState, PlanContext
from .base import Phase, Resource
from .sync_common import assess_role, sync_reads


class SyncWorkers(Phase):
    title = "Sync Registry Config Worker"

    def reads(self, ctx: PlanContext, host: HostState) -> frozenset[str]:
        return sync_reads(ctx, host) if host.config.role == "worker" else frozenset()

    def assess(self, ctx: PlanContext, hosts: Sequence[HostState]) -> set[Resource]:
        return assess_role(ctx, self.title, "worker", hosts)
