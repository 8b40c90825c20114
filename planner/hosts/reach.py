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
import time
from collections.abc import Sequence

Endpoint = tuple[str, int]


def connect_all(endpoints: Sequence[Endpoint], timeout: float
                ) -> dict[Endpoint, socket.socket | OSError]:
    """A connected socket (blocking again, TCP_NODELAY) or the OSError of each endpoint;
    a timeout is a TimeoutError. Every attempt runs at once; the call returns once each
    has connected or failed, at most `timeout` after it started."""
    results: dict[Endpoint, socket.socket | OSError] = {}
    selector = selectors.DefaultSelector()
    try:
        for endpoint in dict.fromkeys(endpoints):
            try:
                infos = socket.getaddrinfo(endpoint[0], endpoint[1], type=socket.SOCK_STREAM)
            except socket.gaierror as exc:
                results[endpoint] = exc
                continue
            family, kind, proto, _, address = infos[0]
            sock = socket.socket(family, kind, proto)
            sock.setblocking(False)
            code = sock.connect_ex(address)
            if code in (0, errno.EINPROGRESS):
                selector.register(sock, selectors.EVENT_WRITE, endpoint)
            else:
                sock.close()
                results[endpoint] = _error(code)
        deadline = time.monotonic() + timeout
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            for key, _ in selector.select(remaining):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                selector.unregister(sock)
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if code:
                    sock.close()
                    results[key.data] = _error(code)
                else:
                    sock.setblocking(True)
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    results[key.data] = sock
        for key in list(selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
            results[key.data] = TimeoutError(errno.ETIMEDOUT, "timed out")
    finally:
        selector.close()
    return results


def _error(code: int) -> OSError:
    if code == errno.ECONNREFUSED:
        return ConnectionRefusedError(code, os.strerror(code))
    if code == errno.ETIMEDOUT:
        return TimeoutError(code, os.strerror(code))
    return OSError(code, os.strerror(code))
