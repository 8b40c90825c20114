"""The bastion's pump, with a fake channel and wire: a host's channel that ends while one
of its writes is half on the wire gets that write finished before it is closed.

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
from planner.hosts.wire import EAGAIN


class _Channel:
    def __init__(self) -> None:
        self.log: list[tuple[str, bytes]] = []
        self.finished = False  # the first write's packet is half sent until written again

    def write(self, data: bytes) -> tuple[int, int]:
        self.log.append(("write", data))
        if len(self.log) == 1:
            return EAGAIN, 0
        self.finished = True
        return len(data), len(data)

    def read(self, size: int) -> tuple[int, bytes]:
        # The host's end comes once our first write is half sent.
        return (0, b"") if self.log else (EAGAIN, b"")

    def eof(self) -> bool:
        return bool(self.log)

    def poll_channel_read(self, stream: int) -> int:
        return 0

    def window_write(self) -> int:
        return 1 << 20

    def send_eof(self) -> int:
        self.log.append(("eof", b""))
        return 0

    def close(self) -> int:
        self.log.append(("close", b""))
        return 0


class _Wire:
    def __init__(self, channel: _Channel) -> None:
        self.channel = channel

    def nudge(self, everyone: bool = True) -> None:
        pass

    def half_sent(self) -> bool:
        return not self.channel.finished

    async def wait(self, ready: Any = None, at_most: float = 0.5) -> str:
        if ready is None:  # a half-sent write waits for the socket: it never comes here
            await asyncio.Event().wait()
        await asyncio.sleep(0.001)
        return "time"

    async def call(self, fn: Any, *args: Any) -> Any:
        return fn(*args)


def test_a_write_half_sent_when_the_host_ends_is_finished_before_the_close() -> None:
    channel = _Channel()
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    try:
        theirs.sendall(b"the host session's bytes")

        async def main() -> None:
            await asyncio.wait_for(_pump(_Wire(channel), channel, ours), 5)  # type: ignore[arg-type]

        asyncio.run(main())
    finally:
        theirs.close()
    assert channel.log == [("write", b"the host session's bytes"),
                           ("write", b"the host session's bytes"), ("close", b"")]
