"""A command's stdin sender (planner/hosts/channel.py ChannelCommand.send) against a
channel whose window stays shut: libssh2's write answers 0 there as well as EAGAIN
(channel.c, _libssh2_channel_write, when its drain read found no whole packet), and
neither may make the sender spin."""

from __future__ import annotations

import asyncio
import socket
import time

from planner.hosts.channel import ChannelCommand
from planner.hosts.wire import BLOCK_INBOUND, EAGAIN, Wire


class Session:
    def block_directions(self) -> int:
        return BLOCK_INBOUND


class ShutWindow:
    """Its window opens `opens_after` seconds after the first write."""

    def __init__(self, opens_after: float) -> None:
        self.opens_after = opens_after
        self.first: float | None = None
        self.writes = 0
        self.taken = bytearray()

    def _open(self) -> bool:
        return self.first is not None and time.monotonic() - self.first >= self.opens_after

    def write(self, data: bytes) -> tuple[int, int]:
        self.writes += 1
        self.first = self.first or time.monotonic()
        if not self._open():
            return (0, 0)  # what libssh2 says when its drain read returned 0
        self.taken += data
        return (len(data), len(data))

    def window_write(self) -> int:
        return 1 << 20 if self._open() else 0

    def eof(self) -> bool:
        return False

    def poll_channel_read(self, stream: int) -> int:
        return 0

    def read(self, size: int) -> tuple[int, bytes]:
        return (EAGAIN, b"")

    def read_stderr(self, size: int) -> tuple[int, bytes]:
        return (EAGAIN, b"")


def test_a_write_that_says_0_with_the_window_shut_waits_instead_of_spinning() -> None:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    channel = ShutWindow(opens_after=0.6)

    async def main() -> None:
        wire = Wire(Session(), ours)
        try:
            await ChannelCommand("h", wire, 10, None).send(channel, b"x" * 1000)
        finally:
            wire.close()

    try:
        asyncio.run(asyncio.wait_for(main(), 10))
    finally:
        ours.close()
        theirs.close()
    assert bytes(channel.taken) == b"x" * 1000
    # Woken by the wire's recheck (0.5 s) while the window is shut, not tried in a loop:
    # a spinning sender made this write hundreds of thousands of times.
    assert channel.writes < 10, channel.writes
