"""12. Disconnect from hosts.

Its dry-run path only disconnects: a dry run made no temp files, so there is nothing to
delete (deleting lingering temp files belongs to a real run).
"""

from __future__ import annotations

from ..context import PlanContext
from .base import DryRun, Phase


class Disconnect(Phase):
    title = "Disconnect from hosts"
    dry_run = DryRun.RUNS_OWN_DRY_RUN_PATH

    def dry_run_path(self, ctx: PlanContext) -> None:
        close_all(ctx)


def close_all(ctx: PlanContext) -> None:
    for host in ctx.hosts:
        if host.reader is not None and ctx.held_sessions is None:
            host.reader.close()
        host.reader = None
    if ctx.handshakes is not None:
        ctx.handshakes.close()  # any phase 1 never took (it did not run, or was stopped)
    if ctx.held_sessions is None:
        # After the hosts: their connections run through these.
        ctx.connect_options.close()
