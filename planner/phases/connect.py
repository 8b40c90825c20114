"""1. Connect to hosts: open one SSH session per host (or take the one the caller holds),
nothing else."""

from __future__ import annotations

import threading

from ..connecting import begin
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
        begin(ctx)  # unless the caller began already

        def connect(host: HostState) -> HostReader:
            if ctx.held_sessions is not None:
                reader = ctx.held_sessions(host.config)
            else:
                began = ctx.handshakes.take(host.config.index) if ctx.handshakes else None
                session = began or open_session(host.label, host.config.ssh,
                                                ctx.connect_options)
                reader = HostReader(session, session.user, options.command_timeout)
            if ctx.prefetch is not None:
                # Right after the handshake, in the same thread: one exec per host for
                # the whole read side of the plan (apply's drift check included).
                before = reader.round_trips
                reader.take_snapshot(ctx.prefetch(host))
                ctx.count_round_trips(self.title, host, reader.round_trips - before)
            return reader

        tally = {"connected": 0, "failed": 0}
        lock = threading.Lock()
        phase = ctx.activity  # "phase 1/12: Connect to hosts", from the runner

        def counted(host: HostState) -> HostReader:
            outcome = "failed"
            try:
                reader = connect(host)
                outcome = "connected"
                return reader
            finally:
                with lock:
                    tally[outcome] += 1
                    ctx.activity = (f"{phase}: {tally['connected']} of {len(ctx.hosts)} "
                                    f"host(s) connected, {tally['failed']} failed")

        results = parallel(ctx.hosts, counted, options.host_concurrency)
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
