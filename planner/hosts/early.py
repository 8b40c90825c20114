"""Every host's SSH session, begun before the plan's phases are built.

Phase 1 only opens a session per host, and nothing before it (building the phases and
importing their code, a tenth of a second) needs a host. So a plan begins the sessions
as soon as its config is read, and phase 1 takes each host's session when it gets to it:
a handshake is about eight round trips to the host, time in which the rest of start-up
runs instead of before it. Every TCP connection is made at once; at most `limit`
handshakes run at a time (the run's host concurrency).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any

from .loop import SshLoop
from .ssh import SshSession

log = logging.getLogger("cargoship.planner")

Opener = Callable[[int, asyncio.Semaphore], Coroutine[Any, Any, SshSession]]


class EarlySessions:
    def __init__(self, count: int, opener: Opener, limit: int, loop: SshLoop) -> None:
        handshakes = asyncio.Semaphore(max(1, limit))
        self._futures: dict[int, Future[SshSession]] = {
            index: loop.submit(opener(index, handshakes)) for index in range(count)}

    def claim(self, index: int) -> Future[SshSession] | None:
        """Host `index`'s session, as a future whose session is now the caller's to close;
        None if it was never begun here or was claimed already."""
        return self._futures.pop(index, None)

    def close(self) -> None:
        """Sessions nobody took (the run ended first): closed as soon as they land."""
        for future in self._futures.values():
            future.add_done_callback(_close_session)
        self._futures.clear()


def _close_session(future: Future[SshSession]) -> None:
    if not future.cancelled() and future.exception() is None:
        session = future.result()
        log.debug("%s: closing a session the run did not take", session.label)
        session.close()
