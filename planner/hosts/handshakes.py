"""Every host's SSH handshake, started before the plan's phases are built.

Phase 1 only opens a session per host, and nothing before it (building the phases and
importing their code, a tenth of a second) needs a host. So a plan starts the handshakes
as soon as its config is read, and phase 1 takes each host's session when it gets to it:
a handshake is about eight round trips to the host, time in which the rest of start-up now
runs instead of before it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from .ssh import SshSession

log = logging.getLogger("cargoship.planner")


class Handshakes:
    """One handshake per host index, at most `limit` at a time (the run's host concurrency,
    as phase 1 would run them)."""

    def __init__(self, count: int, opener: Callable[[int], SshSession], limit: int) -> None:
        self._executor = ThreadPoolExecutor(max_workers=max(1, min(limit, count)),
                                            thread_name_prefix="cargoship-handshake")
        self._futures: dict[int, Future[SshSession]] = {
            index: self._executor.submit(opener, index) for index in range(count)}

    def take(self, index: int) -> SshSession | None:
        """Host `index`'s session once its handshake ends (raising what the handshake
        raised), or None if it was never started here or was taken already."""
        future = self._futures.pop(index, None)
        return None if future is None else future.result()

    def close(self) -> None:
        """Handshakes nobody took (the run ended first): not started ones are dropped,
        running ones closed as soon as they end."""
        for future in self._futures.values():
            if not future.cancel():
                future.add_done_callback(_close_session)
        self._futures.clear()
        self._executor.shutdown(wait=False, cancel_futures=True)


def _close_session(future: Future[SshSession]) -> None:
    if not future.cancelled() and future.exception() is None:
        session = future.result()
        log.debug("%s: closing a session the run did not take", session.label)
        session.close()
