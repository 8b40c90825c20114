"""1. Connect to hosts: open one SSH session per host (or take the one the caller holds),
nothing else."""

from __future__ import annotations

from ..context import HostState, PlanContext
from ..errors import HostError
from ..hosts.pool import parallel
from ..hosts.reader import HostReader
from ..hosts.ssh import open_session
from .base import DryRun, Phase


class Connect(Phase):
    title = "Connect to hosts"
    # A preflight that never reached a host would report on a cluster it never looked at.
    dry_run = DryRun.RUNS_READ_ONLY

    def run(self, ctx: PlanContext) -> None:
        options = ctx.config.options

        def connect(host: HostState) -> HostReader:
            if ctx.held_sessions is not None:
                return ctx.held_sessions(host.config)
            session = open_session(host.label, host.config.ssh, ctx.connect_options)
            return HostReader(session, session.user, options.command_timeout)

        results = parallel(ctx.hosts, connect, options.host_concurrency)
        for host, result in zip(ctx.hosts, results, strict=True):
            if isinstance(result, HostError):
                ctx.fail_host(self.title, host, result.message)
            elif isinstance(result, Exception):
                ctx.fail_host(self.title, host, f"cannot connect: {result}")
            else:
                host.reader = result
                host.host_key = result.host_key_fingerprint
                ctx.found(self.title, host, f"connected as {result.user} to "
                                            f"{host.config.ssh.endpoint}, host key "
                                            f"{result.host_key_fingerprint}")
