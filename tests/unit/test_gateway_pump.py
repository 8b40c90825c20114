"""The bastion's pump on a real Wire with a fake libssh2 session (fake_libssh2.py): a
host's channel that ends while one of its writes is half on the wire gets that write
finished, then its close sent, and the bastion's other hosts go on.

libssh2 sends nothing else on a connection while a packet is half sent, until the same
write is made again (transport.c, transport_send_existing): a half-sent write left behind
would cut off every other host behind the bastion. The lab cannot hold a write half sent
at the moment a host's channel ends (the bastion drains it first), so it is shown here.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from planner.hosts.gateways import _pump
from planner.hosts.wire import EAGAIN, Wire
from tests.unit.fake_libssh2 import FakeChannel, FakeSession


class _HostChannel(FakeChannel):
    """The bastion's channel to a host whose end comes once our first write is half sent."""

    def read(self, size: int) -> tuple[int, bytes]:
        return (0, b"") if self.eof() else (EAGAIN, b"")

    def eof(self) -> bool:
        return self.session.pending is not None or bool(self.session.sent)

    def poll_channel_read(self, stream: int) -> int:
        return 0

    def window_write(self) -> int:
        return 1 << 20

    def send_eof(self) -> int:
        return 0


def test_a_write_half_sent_when_the_host_ends_is_finished_before_the_close() -> None:
    session = FakeSession(room=False)
    channel = _HostChannel(session, "host")
    other = session.channel("another host")
    ours, theirs = socket.socketpair()
    wire_ours, wire_theirs = socket.socketpair()
    ours.setblocking(False)
    wire_ours.setblocking(False)
    try:
        theirs.sendall(b"the host session's bytes")

        async def main() -> Any:
            wire = Wire(session, wire_ours)
            await asyncio.wait_for(_pump(wire, channel, ours), 5)  # type: ignore[arg-type]
            session.room = True  # the socket drains
            # Another host behind the same bastion goes on.
            return await asyncio.wait_for(wire.call(other.write, b"next"), 5)

        assert asyncio.run(main()) == (4, 4)
    finally:
        for end in (theirs, wire_ours, wire_theirs):
            end.close()
    assert session.sent == [("host", "write", b"the host session's bytes"),
                            ("host", "close", b""), ("another host", "write", b"next")]
