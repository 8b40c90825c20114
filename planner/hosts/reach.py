"""TCP connections to every directly reached host at once, before any SSH handshake.

Hosts are read `options.concurrency.hosts` at a time, and a dead host holds its slot for the
whole connect timeout: with most of a fleet down, a plan took one timeout per wave. Opening
every TCP connection at once (non-blocking, one thread, a selector) bounds that to one
connect timeout in all; the SSH handshakes then run on the sockets that connected, and a
host whose connection failed is reported with the same words as before.
"""

from __future__ import annotations

import errno
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import cast

Endpoint = tuple[str, int]
Result = socket.socket | OSError


class Dialled:
    """The TCP connections of one run, as they come in: a handshake thread takes its own
    host's as soon as it is there, not once the slowest host has answered."""

    def __init__(self) -> None:
        self._results: dict[Endpoint, Result] = {}
        self._expected: set[Endpoint] = set()
        self._waiting: dict[Endpoint, Callable[[Result], None]] = {}
        self._ready = threading.Condition()

    def start(self, endpoints: Sequence[Endpoint], timeout: float) -> None:
        """Dial every endpoint at once, in a thread of its own."""
        with self._ready:
            self._expected |= set(endpoints)
        threading.Thread(target=connect_all, args=(list(endpoints), timeout, self._put),
                         name="cargoship-dial", daemon=True).start()

    def _put(self, endpoint: Endpoint, result: Result) -> None:
        with self._ready:
            waiting = self._waiting.pop(endpoint, None)
            if waiting is None and endpoint not in self._expected:
                if isinstance(result, socket.socket):
                    result.close()  # the run was closed meanwhile
                return
            if waiting is None:
                self._results[endpoint] = result
                self._ready.notify_all()
                return
            self._expected.discard(endpoint)
        waiting(result)

    def when_ready(self, endpoint: Endpoint, then: Callable[[Result], None]) -> bool:
        """Hand this endpoint's socket or error (once) to `then` as soon as it is there:
        now, or later from the dialling thread. False if it was not dialled here."""
        with self._ready:
            if endpoint not in self._expected or endpoint in self._waiting:
                return False
            if endpoint not in self._results:
                self._waiting[endpoint] = then
                return True
            self._expected.discard(endpoint)
            result = self._results.pop(endpoint)
        then(result)
        return True

    def take(self, endpoint: Endpoint, wait: float) -> Result | None:
        """This endpoint's socket or error (once), or None if it was not dialled here."""
        with self._ready:
            if endpoint not in self._expected:
                return None
            self._ready.wait_for(lambda: endpoint in self._results, timeout=wait)
            self._expected.discard(endpoint)
            return self._results.pop(endpoint, None)

    def close(self) -> None:
        """Sockets nobody took (a host that dropped out before its handshake); whoever
        still waits for one hears that the run ended, and one that comes later is closed."""
        with self._ready:
            for result in self._results.values():
                if isinstance(result, socket.socket):
                    result.close()
            self._results.clear()
            self._expected.clear()
            waiting, self._waiting = self._waiting, {}
        for then in waiting.values():
            then(ConnectionAbortedError(errno.ECONNABORTED, "the run ended before it connected"))


def connect_all(endpoints: Sequence[Endpoint], timeout: float,
                on_result: Callable[[Endpoint, Result], None] | None = None,
                ) -> dict[Endpoint, Result]:
    """A connected socket (blocking again, TCP_NODELAY) or the OSError of each endpoint;
    a timeout is a TimeoutError. Every attempt runs at once; the call returns once each
    has connected or failed, at most `timeout` after it started. `on_result` hears of
    each one as it comes."""
    results: dict[Endpoint, Result] = {}

    def report(endpoint: Endpoint, result: Result) -> None:
        results[endpoint] = result
        if on_result is not None:
            on_result(endpoint, result)

    selector = selectors.DefaultSelector()
    try:
        for endpoint in dict.fromkeys(endpoints):
            try:
                infos = socket.getaddrinfo(endpoint[0], endpoint[1], type=socket.SOCK_STREAM)
            except socket.gaierror as exc:
                report(endpoint, exc)
                continue
            family, kind, proto, _, address = infos[0]
            try:
                sock = socket.socket(family, kind, proto)
            except OSError as exc:  # out of file descriptors: this host's error, not all's
                report(endpoint, exc)
                continue
            sock.setblocking(False)
            code = sock.connect_ex(address)
            if code in (0, errno.EINPROGRESS):
                selector.register(sock, selectors.EVENT_WRITE, endpoint)
            else:
                sock.close()
                report(endpoint, _error(code))
        deadline = time.monotonic() + timeout
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            for key, _ in selector.select(remaining):
                done = cast(socket.socket, key.fileobj)  # only our sockets are registered
                selector.unregister(done)
                code = done.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if code:
                    done.close()
                    report(key.data, _error(code))
                else:
                    done.setblocking(True)
                    done.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    report(key.data, done)
        for key in list(selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
            report(key.data, TimeoutError(errno.ETIMEDOUT, "timed out"))
    finally:
        selector.close()
    return results


def _error(code: int) -> OSError:
    if code == errno.ECONNREFUSED:
        return ConnectionRefusedError(code, os.strerror(code))
    if code == errno.ETIMEDOUT:
        return TimeoutError(code, os.strerror(code))
    return OSError(code, os.strerror(code))
