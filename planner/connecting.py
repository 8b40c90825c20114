"""The start of phase 1 (Connect to hosts), callable before the phases exist: every host's
TCP connection and SSH handshake begin here (hosts/handshakes.py), and phase 1 takes the
sessions. The CLI begins right after reading the config, so the rest of its start-up runs
during the handshakes; anything else that runs the phases gets the same from phase 1."""

from __future__ import annotations

from concurrent.futures import Future

from .context import HostState, PlanContext
from .hosts.handshakes import Handshakes
from .hosts.libssh2 import start_fast
from .hosts.ssh import Session, direct_endpoint, open_session
from .startup import since_process_start


def _endpoint(ctx: PlanContext, host: HostState) -> tuple[str, int] | None:
    try:
        return direct_endpoint(host.config.ssh, ctx.connect_options)
    except Exception:  # noqa: BLE001 - e.g. a broken ~/.ssh/config: that host's handshake
        return None    # meets it again and reports it as that host's error


def begin(ctx: PlanContext) -> None:
    """Start every host's connection and handshake now. Once per run; not for a run on
    sessions its caller holds (an apply's drift check)."""
    if ctx.held_sessions is not None or ctx.handshakes is not None:
        return
    options = ctx.config.options
    first_dial = since_process_start()
    # Every direct host's TCP connection at once: dead hosts cost one connect timeout in
    # all, not one per wave of `concurrency.hosts` handshakes.
    endpoints = [e for h in ctx.hosts if (e := _endpoint(ctx, h))]
    ctx.connect_options.dialled.start(endpoints, options.connect_timeout)

    def handshake(index: int) -> Session:
        host = ctx.hosts[index]
        return open_session(host.label, host.config.ssh, ctx.connect_options)

    def fast(index: int) -> Future[Session | None] | None:
        host = ctx.hosts[index]
        return start_fast(host.label, host.config.ssh, ctx.connect_options)

    ctx.handshakes = Handshakes(len(ctx.hosts), handshake, options.host_concurrency, fast)
    ctx.startup = first_dial.marked()
