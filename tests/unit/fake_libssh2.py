"""A libssh2 session's one rule about packets, as a fake for Wire tests.

libssh2 encrypts a packet before it sends it; when the socket takes only part of it, the
call says EAGAIN and the packet stays in the session, half sent. Until the same call is
made again and finishes it, every other call that would send answers EAGAIN
(transport.c, send_existing: "Address is different, returning EAGAIN"), and
libssh2_session_block_directions says OUTBOUND. Here the socket takes a packet only while
`room` is True; nothing is really sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.hosts.wire import BLOCK_INBOUND, BLOCK_OUTBOUND, EAGAIN


@dataclass
class FakeSession:
    room: bool = True
    pending: tuple[FakeChannel, str, bytes] | None = None  # who began it, what, its data
    sent: list[tuple[str, str, bytes]] = field(default_factory=list)  # (channel, what, data)

    def block_directions(self) -> int:
        return BLOCK_OUTBOUND if self.pending else BLOCK_INBOUND

    def channel(self, name: str) -> FakeChannel:
        return FakeChannel(self, name)

    def send(self, channel: FakeChannel, what: str, data: bytes) -> bool:
        """One call's packet: whether it is all out now."""
        if self.pending is not None:
            if self.pending[:2] != (channel, what):
                return False  # another call's packet is half sent: EAGAIN, nothing begun
            if not self.room:
                return False
            self.pending = None
            self.sent.append((channel.name, what, data))
            return True
        if not self.room:
            self.pending = (channel, what, data)  # encrypted, part of it on the wire
            return False
        self.sent.append((channel.name, what, data))
        return True


class FakeChannel:
    def __init__(self, session: FakeSession, name: str) -> None:
        self.session, self.name = session, name
        self.closed = False

    def write(self, data: bytes) -> tuple[int, int]:
        return (len(data), len(data)) if self.session.send(self, "write", data) else (EAGAIN, 0)

    def close(self) -> int:
        if self.closed:
            return 0
        if not self.session.send(self, "close", b""):
            return EAGAIN
        self.closed = True
        return 0
