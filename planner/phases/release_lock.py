"""11. Release exclusive host lock: deletes the lock file from each host.

It needs to read nothing to know what it would do: it releases the locks its own run took.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..context import HostState, PlanContext
from .base import Phase, Resource


class ReleaseLock(Phase):
    title = "Release exclusive host lock"

    def assess(self, ctx: PlanContext, hosts: Sequence[HostState]) -> set[Resource]:
        if hosts:
            ctx.found(self.title, None, f"would release the lock on {len(hosts)} host(s)")
        return {(h.config.index, "lock") for h in hosts}
