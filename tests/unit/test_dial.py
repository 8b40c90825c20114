"""A host's TCP connection (planner/hosts/dial.py): connected, refused and silent
endpoints on this machine; the name resolved inside the deadline; every address tried."""

from __future__ import annotations

import asyncio
import errno
import socket
import time
from typing import Any

import pytest

from planner.hosts.dial import dial


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


async def _all(*endpoints: tuple[str, int], timeout: float) -> list[Any]:
    return await asyncio.gather(*(dial(h, p, timeout) for h, p in endpoints),
                                return_exceptions=True)


def test_connected_refused_and_timed_out_in_one_timeout() -> None:
    listening = socket.create_server(("127.0.0.1", 0))
    closed = socket.create_server(("127.0.0.1", 0))
    refused = closed.getsockname()[1]
    closed.close()
    full, fillers = silent_listener()
    started = time.monotonic()
    ok, no, silent = asyncio.run(_all(("127.0.0.1", listening.getsockname()[1]),
                                      ("127.0.0.1", refused),
                                      ("127.0.0.1", full.getsockname()[1]), timeout=1.0))
    elapsed = time.monotonic() - started
    assert isinstance(silent, TimeoutError), silent
    assert isinstance(ok, socket.socket)
    assert ok.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    assert isinstance(no, ConnectionRefusedError)
    assert 1.0 <= elapsed < 3  # one timeout for all, the silent one's
    ok.close()
    for s in [listening, full, *fillers]:
        s.close()


def test_every_address_is_tried_within_one_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    # A name with two addresses: the first never answers, the second listens. The first
    # gets its share of the deadline, not all of it.
    full, fillers = silent_listener()
    listening = socket.create_server(("127.0.0.1", 0))
    addresses = [full.getsockname(), listening.getsockname()]

    async def resolve(self: Any, host: str, port: int, **_: Any) -> list[Any]:
        assert host == "two.example"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", a) for a in addresses]

    monkeypatch.setattr(asyncio.BaseEventLoop, "getaddrinfo", resolve)
    started = time.monotonic()
    sock = asyncio.run(dial("two.example", 22, 2.0))
    assert sock.getpeername() == listening.getsockname()
    assert time.monotonic() - started < 1.9
    sock.close()
    for s in [listening, full, *fillers]:
        s.close()


def test_a_name_that_never_resolves_ends_at_the_deadline(monkeypatch: pytest.MonkeyPatch,
                                                         ) -> None:
    async def hang(self: Any, *_: Any, **__: Any) -> list[Any]:
        await asyncio.sleep(60)
        return []

    monkeypatch.setattr(asyncio.BaseEventLoop, "getaddrinfo", hang)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        asyncio.run(dial("slow.example", 22, 0.5))
    assert time.monotonic() - started < 2


def test_a_name_that_does_not_resolve_says_so() -> None:
    with pytest.raises(socket.gaierror):
        asyncio.run(dial("no-such-host.invalid", 22, 5))


def test_a_socket_that_cannot_be_made_fails_that_host_only(monkeypatch: pytest.MonkeyPatch,
                                                           ) -> None:
    listening = socket.create_server(("127.0.0.1", 0))
    real = socket.socket
    made: list[int] = []

    def scarce(*args: Any, **kwargs: Any) -> socket.socket:
        if made:  # the second socket: no file descriptors left
            raise OSError(errno.EMFILE, "Too many open files")
        made.append(1)
        return real(*args, **kwargs)

    async def scarcely() -> list[Any]:
        monkeypatch.setattr(socket, "socket", scarce)  # the loop has its own sockets already
        try:
            return await _all(("127.0.0.1", listening.getsockname()[1]), ("127.0.0.1", 9),
                              timeout=1.0)
        finally:
            monkeypatch.setattr(socket, "socket", real)

    ok, failed = asyncio.run(scarcely())
    assert isinstance(ok, real)
    assert isinstance(failed, OSError) and failed.errno == errno.EMFILE
    ok.close()
    listening.close()


def test_an_address_given_as_one_needs_no_resolver_thread(monkeypatch: pytest.MonkeyPatch,
                                                          ) -> None:
    """A fleet's hosts are mostly addresses: dialled without the loop's resolver (a thread
    hop each, and a pool of threads for a fleet); a name still goes to it."""
    asked: list[str] = []

    async def resolve(self: Any, host: str, *args: Any, **kwargs: Any) -> Any:
        asked.append(host)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(asyncio.BaseEventLoop, "getaddrinfo", resolve)
    servers = []
    for family, address in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        server = socket.socket(family)
        try:
            server.bind((address, 0))
        except OSError:  # a machine without IPv6 on its loopback: the IPv4 half still holds
            server.close()
            continue
        server.listen(1)
        servers.append(server)
    try:
        endpoints = [(s.getsockname()[0], s.getsockname()[1]) for s in servers]
        *dialled, name = asyncio.run(_all(*endpoints, ("a-name.invalid", 22), timeout=5))
        for sock, server in zip(dialled, servers, strict=True):
            assert isinstance(sock, socket.socket) and sock.family == server.family
            sock.close()
        assert isinstance(name, socket.gaierror)
        assert asked == ["a-name.invalid"]
    finally:
        for server in servers:
            server.close()
