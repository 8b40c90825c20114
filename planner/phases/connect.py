"""1. Connect to hosts: open one SSH session per host (or take the one the caller holds),
nothing else."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial

from ..connecting import begin
from ..context import HostState, PlanContext
from ..errors import HostError
from ..hosts.pool import parallel
from ..hosts.reader import HostReader
from ..hosts.ssh import Session, SshSession, connect
from ..threads import Executor
from .base import DryRun, Phase


class Connect(Phase):
    title = "Connect to hosts"
    # A preflight that never reached a host would report on a cluster it never looked at.
    dry_run = DryRun.RUNS_READ_ONLY

    def run(self, ctx: PlanContext) -> None:
        options = ctx.config.options
        begin(ctx)  # unless the caller began already

        def connect(host: HostState) -> HostReader:
            """A host of apply's drift check, on the session its caller holds."""
            assert ctx.held_sessions is not None
            reader = ctx.held_sessions(host.config)
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
                note(outcome)

        def note(outcome: str) -> None:
            with lock:
                tally[outcome] += 1
                ctx.activity = (f"{phase}: {tally['connected']} of {len(ctx.hosts)} "
                                f"host(s) connected, {tally['failed']} failed")

        if ctx.held_sessions is None:
            results = self._as_they_land(ctx, note)  # begin() started the handshakes
        else:
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

    def _as_they_land(self, ctx: PlanContext, note: Callable[[str], None],
                      ) -> list[HostReader | Exception]:
        """Each host's snapshot is sent as soon as its handshake lands, from the run's SSH
        loop (a session that can only wait for its command, a test's, from a thread of
        its own). This thread only collects, in config order, so a fleet needs no thread
        per host."""
        assert ctx.handshakes is not None
        limit = ctx.config.options.host_concurrency
        blocking = Executor(max_workers=max(1, min(limit, len(ctx.hosts))),
                            thread_name_prefix="cargoship-host")
        pending: list[Future[HostReader]] = []
        for host in ctx.hosts:
            ready: Future[HostReader] = Future()
            ready.add_done_callback(
                lambda f: note("failed" if f.exception() is not None else "connected"))
            pending.append(ready)
            claimed = ctx.handshakes.claim(host.config.index)
            if claimed is None:  # begun by nobody (or taken): begun here
                claimed = ctx.connect_options.loop.submit(
                    connect(host.label, host.config.ssh, ctx.connect_options))
            claimed.add_done_callback(partial(_landed, ctx, host, ready, blocking))
        results: list[HostReader | Exception] = []
        try:
            for host, ready in zip(ctx.hosts, pending, strict=True):
                try:
                    reader = ready.result()
                except Exception as exc:  # noqa: BLE001 - that host's failure, reported
                    results.append(exc)
                    continue
                ctx.count_round_trips(self.title, host, reader.round_trips)
                results.append(reader)
            return results
        finally:
            blocking.shutdown(wait=False, cancel_futures=True)


def _landed(ctx: PlanContext, host: HostState, ready: Future[HostReader],
            blocking: ThreadPoolExecutor,
            claimed: Future[SshSession] | Future[Session]) -> None:
    """A host's handshake ended: its reader, and its snapshot on the way (see above)."""
    try:
        session = claimed.result()
        reader = HostReader(session, session.user, ctx.config.options.command_timeout)
        facts = ctx.prefetch(host) if ctx.prefetch is not None else None
        started = reader.start_snapshot(facts) if facts is not None else None
    except Exception as exc:  # noqa: BLE001 - raised to the collector, for that host
        ready.set_exception(exc)
        return
    if facts is None:
        ready.set_result(reader)
    elif started is not None:
        started.add_done_callback(lambda _: ready.set_result(reader))
    else:
        def snapshot() -> None:
            try:
                reader.take_snapshot(facts)
            except Exception as exc:  # noqa: BLE001 - raised to the collector
                ready.set_exception(exc)
            else:
                ready.set_result(reader)

        try:
            blocking.submit(snapshot)
        except RuntimeError as exc:  # the phase is over (interrupted)
            reader.close()
            ready.set_exception(exc)
