"""Every host's SSH handshake, started before the plan's phases are built.

Phase 1 only opens a session per host, and nothing before it (building the phases and
importing their code, a tenth of a second) needs a host. So a plan starts the handshakes
as soon as its config is read, and phase 1 takes each host's session when it gets to it:
a handshake is about eight round trips to the host, time in which the rest of start-up now
runs instead of before it.

A host libssh2 can reach (libssh2.py) shakes hands on the run's SSH loop; any other, or
one whose key libssh2 saw refused, in a thread of its own through paramiko (ssh.py).
Either way at most `limit` at a time (the run's host concurrency), in config order.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from .ssh import Session

log = logging.getLogger("cargoship.planner")

Fast = Callable[[int], "Future[Session | None] | None"]


class Handshakes:
    def __init__(self, count: int, opener: Callable[[int], Session], limit: int,
                 fast: Fast | None = None) -> None:
        self._opener, self._fast = opener, fast
        self._limit = max(1, limit)
        # Threads are made only for the handshakes that need one.
        self._executor = ThreadPoolExecutor(max_workers=max(1, min(limit, count)),
                                            thread_name_prefix="cargoship-handshake")
        self._futures: dict[int, Future[Session]] = {i: Future() for i in range(count)}
        self._outcomes = dict(self._futures)
        self._pending = deque(range(count))
        self._lock = threading.Lock()
        self._active = 0
        self._filling = False
        self._closed = False
        self._fill()

    def claim(self, index: int) -> Future[Session] | None:
        """Host `index`'s handshake, as a future whose session is now the caller's to
        close; None if it was never started here or was claimed already."""
        return self._futures.pop(index, None)

    def close(self) -> None:
        """Handshakes nobody took (the run ended first): not started ones are dropped,
        running ones closed as soon as they end."""
        with self._lock:
            self._closed = True
        for future in self._futures.values():
            future.add_done_callback(_close_session)
        self._futures.clear()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _fill(self) -> None:
        """Start handshakes while fewer than `limit` run. One thread fills at a time; a
        handshake that ends meanwhile (even at once, inside _start) only frees its slot,
        which that thread's next turn of the loop sees."""
        with self._lock:
            if self._filling:
                return
            self._filling = True
        try:
            while True:
                with self._lock:
                    if self._closed or not self._pending or self._active >= self._limit:
                        self._filling = False
                        return
                    index = self._pending.popleft()
                    self._active += 1
                self._start(index)
        except BaseException:
            with self._lock:
                self._filling = False
            raise

    def _start(self, index: int) -> None:
        outcome = self._outcomes[index]
        try:
            started = self._fast(index) if self._fast is not None else None
        except Exception as exc:  # noqa: BLE001 - that host's error, for its claimer
            self._end(outcome, exc)
            return
        if started is None:
            self._thread(index, outcome)
            return

        def landed(fast: Future[Session | None]) -> None:
            exc = fast.exception()
            if exc is not None:
                self._end(outcome, exc)
            elif (session := fast.result()) is None:
                self._thread(index, outcome)  # refused over libssh2: paramiko, same slot
            else:
                self._end(outcome, session)

        started.add_done_callback(landed)

    def _thread(self, index: int, outcome: Future[Session]) -> None:
        def run() -> None:
            try:
                result: Session | BaseException = self._opener(index)
            except Exception as exc:  # noqa: BLE001 - for the claimer
                result = exc
            self._end(outcome, result)

        try:
            self._executor.submit(run)
        except RuntimeError as exc:  # closed meanwhile
            self._end(outcome, exc)

    def _end(self, outcome: Future[Session], result: Session | BaseException) -> None:
        if isinstance(result, BaseException):
            outcome.set_exception(result)
        else:
            outcome.set_result(result)
        with self._lock:
            self._active -= 1
        self._fill()


def _close_session(future: Future[Session]) -> None:
    if not future.cancelled() and future.exception() is None:
        session = future.result()
        log.debug("%s: closing a session the run did not take", session.label)
        session.close()
