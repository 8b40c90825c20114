"""A packet libssh2 left half sent is finished by the call that began it, even when nobody
waits for that call any more: a cancelled write, a channel's close made when the socket was
full. Left there, it would stop every other channel of the session for good (one host's
timed-out command cutting off every host behind a shared bastion). Real sockets, a fake
session with libssh2's packet rule (fake_libssh2.py)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from planner.hosts.wire import Wire
from tests.unit.fake_libssh2 import FakeSession


@pytest.fixture
def sock() -> Iterator[socket.socket]:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    yield ours
    ours.close()
    theirs.close()


async def _after(seconds: float, session: FakeSession) -> None:
    await asyncio.sleep(seconds)
    session.room = True


def test_a_write_cancelled_half_sent_is_finished_and_the_session_goes_on(sock: Any) -> None:
    session = FakeSession(room=False)
    a, b = session.channel("a"), session.channel("b")

    async def main() -> None:
        wire = Wire(session, sock)
        writing = asyncio.create_task(wire.call(a.write, b"a's"))
        await asyncio.sleep(0.05)
        assert session.pending is not None  # a's packet is half on the wire
        writing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await writing
        draining = asyncio.create_task(_after(0.05, session))
        assert await asyncio.wait_for(wire.call(b.write, b"b's"), 2) == (3, 3)
        await draining

    asyncio.run(main())
    assert session.sent == [("a", "write", b"a's"), ("b", "write", b"b's")]


def test_a_close_made_when_the_socket_is_full_goes_out_later(sock: Any) -> None:
    session = FakeSession(room=False)
    a, b = session.channel("a"), session.channel("b")

    async def main() -> None:
        wire = Wire(session, sock)
        wire.call_soon(a.close)  # nobody waits for it
        assert session.pending is not None
        draining = asyncio.create_task(_after(0.05, session))
        assert await asyncio.wait_for(wire.call(b.write, b"b's"), 2) == (3, 3)
        await draining

    asyncio.run(main())
    assert session.sent == [("a", "close", b""), ("b", "write", b"b's")]


def test_a_close_behind_another_calls_packet_is_sent_after_it(sock: Any) -> None:
    session = FakeSession(room=False)
    a, b = session.channel("a"), session.channel("b")

    async def main() -> None:
        wire = Wire(session, sock)
        writing = asyncio.create_task(wire.call(a.write, b"a's"))
        await asyncio.sleep(0.05)
        wire.call_soon(b.close)  # says EAGAIN: a's packet is on the wire, b's not begun
        assert session.pending is not None and session.pending[0] is a
        session.room = True
        await asyncio.wait_for(writing, 2)
        for _ in range(200):
            if b.closed:
                break
            await asyncio.sleep(0.01)

    asyncio.run(main())
    assert session.sent == [("a", "write", b"a's"), ("b", "close", b"")]


def test_settle_finishes_only_the_owners_packet(sock: Any) -> None:
    # b gave up while a's packet was on the wire: b began nothing, so nothing of b's is
    # sent; a, still waiting, finishes its own.
    session = FakeSession(room=False)
    a, b = session.channel("a"), session.channel("b")

    async def main() -> None:
        wire = Wire(session, sock)
        writing = asyncio.create_task(wire.call(a.write, b"a's"))
        await asyncio.sleep(0.02)
        giving_up = asyncio.create_task(wire.call(b.write, b"b's"))
        await asyncio.sleep(0.02)
        giving_up.cancel()
        with pytest.raises(asyncio.CancelledError):
            await giving_up
        session.room = True
        await asyncio.wait_for(writing, 2)
        await asyncio.sleep(0.1)  # anything b's settle would have sent has gone by now

    asyncio.run(main())
    assert session.sent == [("a", "write", b"a's")]


def test_a_closed_wire_stops_finishing(sock: Any) -> None:
    session = FakeSession(room=False)
    a = session.channel("a")

    async def main() -> int:
        wire = Wire(session, sock)
        wire.call_soon(a.close)
        await asyncio.sleep(0.05)
        finishing = set(wire._finishing)
        assert finishing
        wire.close()
        await asyncio.wait_for(asyncio.gather(*finishing), 2)
        return len(wire._finishing)

    assert asyncio.run(main()) == 0
    assert session.sent == []


def test_a_closed_wire_sends_nothing_more(sock: Any) -> None:
    # Closed, its socket may be gone and its number another connection's: libssh2 must not
    # be asked to send there, not even a channel's close.
    session = FakeSession(room=True)
    a = session.channel("a")

    async def main() -> None:
        wire = Wire(session, sock)
        wire.close()
        wire.call_soon(a.close)

    asyncio.run(main())
    assert session.sent == [] and not a.closed
