"""Every TCP connection at once: connected, refused and silent endpoints, on this machine."""

from __future__ import annotations

import socket
import time

from planner.hosts.reach import connect_all


def silent_listener() -> tuple[socket.socket, list[socket.socket]]:
    """A listener whose backlog is full and never accepts: further SYNs go unanswered, so
    a connection to it hangs. Close the listener and the fillers after use."""
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)
    fillers = []
    for _ in range(8):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(full.getsockname())
        fillers.append(s)
    return full, fillers


def test_connected_refused_and_timed_out_in_one_timeout() -> None:
    listening = socket.create_server(("127.0.0.1", 0))
    closed = socket.create_server(("127.0.0.1", 0))
    refused = closed.getsockname()[1]
    closed.close()
    full, fillers = silent_listener()
    ok = ("127.0.0.1", listening.getsockname()[1])
    silent = ("127.0.0.1", full.getsockname()[1])
    started = time.monotonic()
    results = connect_all([ok, ("127.0.0.1", refused), silent], timeout=1.0)
    elapsed = time.monotonic() - started
    assert isinstance(results[silent], TimeoutError), results[silent]
    assert isinstance(results[ok], socket.socket)
    assert results[ok].getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    assert isinstance(results[("127.0.0.1", refused)], ConnectionRefusedError)
    assert 1.0 <= elapsed < 3  # one timeout for all, the silent one's
    for value in results.values():
        if isinstance(value, socket.socket):
            value.close()
    for s in [listening, full, *fillers]:
        s.close()


def test_a_socket_that_cannot_be_made_fails_that_endpoint_only(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import errno

    listening = socket.create_server(("127.0.0.1", 0))
    ok = ("127.0.0.1", listening.getsockname()[1])
    real = socket.socket
    made = []

    def scarce(*args, **kwargs):  # type: ignore[no-untyped-def]
        if made:  # the second socket: no file descriptors left
            raise OSError(errno.EMFILE, "Too many open files")
        made.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(socket, "socket", scarce)
    results = connect_all([ok, ("127.0.0.1", 9)], timeout=1.0)
    monkeypatch.setattr(socket, "socket", real)
    assert isinstance(results[ok], real)
    assert isinstance(results[("127.0.0.1", 9)], OSError)
    results[ok].close()  # type: ignore[union-attr]
    listening.close()
