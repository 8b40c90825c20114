"""The start of phase 1 (Connect to hosts), callable before the phases exist: every host's
TCP connection and SSH handshake begin here (hosts/early.py), and phase 1 takes the
sessions. The CLI begins right after reading the config, so the rest of its start-up runs
during the handshakes; anything else that runs the phases gets the same from phase 1."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from .context import PlanContext
from .hosts.early import EarlySessions
from .hosts.ssh import SshSession, connect
from .startup import since_process_start


def begin(ctx: PlanContext) -> None:
    """Begin every host's connection and handshake now. Once per run; not for a run on
    sessions its caller holds (an apply's drift check)."""
    if ctx.held_sessions is not None or ctx.handshakes is not None:
        return
    first_dial = since_process_start()
    options = ctx.connect_options

    def opener(index: int, handshakes: asyncio.Semaphore) -> Coroutine[Any, Any, SshSession]:
        host = ctx.hosts[index]
        return connect(host.label, host.config.ssh, options, handshakes=handshakes)

    ctx.handshakes = EarlySessions(len(ctx.hosts), opener, ctx.config.options.host_concurrency,
                                   options.loop)
    ctx.startup = first_dial.marked()

