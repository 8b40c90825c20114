"""The run's SSH loop (one asyncio thread for every session) and a libssh2 session's wire
on it: EAGAIN waited out on the socket, sleepers woken when another call queued their
data, channel opens taking turns, a late open jamming its session. Real sockets, fake
libssh2 sessions (they say EAGAIN until their socket has bytes)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from planner.hosts.handshake import host_key_order
from planner.hosts.loop import LoopClosed, SshLoop
from planner.hosts.wire import BLOCK_INBOUND, EAGAIN, Wire


class FakeSession:
    """Reads its socket into per-channel queues, as libssh2 does: a read for one channel
    takes every byte that came, each byte naming the channel it is for."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.queues: dict[int, bytearray] = {}

    def block_directions(self) -> int:
        return BLOCK_INBOUND

    def read(self, channel: int) -> tuple[int, bytes]:
        try:
            while data := self.sock.recv(4096):
                for byte in data:
                    self.queues.setdefault(byte, bytearray()).append(byte)
        except BlockingIOError:
            pass
        queued = self.queues.pop(channel, None)
        return (len(queued), bytes(queued)) if queued else (EAGAIN, b"")


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    yield ours, theirs
    ours.close()
    theirs.close()


def test_a_call_waits_on_the_socket_and_returns_what_came(pair: Any) -> None:
    ours, theirs = pair
    session = FakeSession(ours)

    async def main() -> Any:
        wire = Wire(session, ours)
        asyncio.get_running_loop().call_later(0.1, theirs.send, b"\x01")
        started = time.monotonic()
        result = await wire.call(session.read, 1)
        return result, time.monotonic() - started

    (size, data), elapsed = asyncio.run(main())
    assert (size, data) == (1, b"\x01")
    assert 0.05 < elapsed < 0.45  # woken by the socket, not by the RECHECK net


def test_a_sleeper_whose_data_another_call_took_is_woken(pair: Any) -> None:
    # Channel 2 sleeps; channel 1's read takes channel 2's byte off the socket too. The
    # socket stays quiet, so only the nudge can wake channel 2 in time.
    ours, theirs = pair
    session = FakeSession(ours)

    async def main() -> float:
        wire = Wire(session, ours)
        two = asyncio.create_task(wire.call(session.read, 2,
                                            ready=lambda: 2 in session.queues))
        await asyncio.sleep(0.05)  # channel 2 is asleep on the socket
        theirs.send(b"\x01\x02")
        started = time.monotonic()
        await wire.call(session.read, 1)
        await two
        return time.monotonic() - started

    assert asyncio.run(main()) < 0.3  # the RECHECK net is 0.5 s


def test_two_blocked_sleepers_do_not_wake_each_other_forever(pair: Any) -> None:
    ours, _ = pair
    session = FakeSession(ours)
    calls = [0]

    def counted(channel: int) -> tuple[int, bytes]:
        calls[0] += 1
        return session.read(channel)

    async def main() -> None:
        wire = Wire(session, ours)
        tasks = [asyncio.create_task(wire.call(counted, c)) for c in (1, 2)]
        await asyncio.sleep(1.0)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())
    assert calls[0] < 20, calls  # a few tries (first, nudge, RECHECK), not a spin


def test_opens_take_turns_and_one_out_of_time_jams_the_session(pair: Any) -> None:
    ours, theirs = pair
    session = FakeSession(ours)
    active: set[int] = set()
    most = [0]

    async def main() -> tuple[int, int]:
        wire = Wire(session, ours)

        def opening(channel: int) -> Any:
            active.add(channel)
            most[0] = max(most[0], len(active))
            result = session.read(channel)
            if result[0] != EAGAIN:
                active.discard(channel)
            return result

        late = asyncio.create_task(wire.open(opening, 7, timeout=0.2))
        with pytest.raises(TimeoutError):
            await late
        jammed = wire.jammed
        theirs.send(b"\x07")  # the late answer: taken and dropped by the open itself
        for _ in range(100):
            if not wire.jammed:
                break
            await asyncio.sleep(0.02)
        theirs.send(b"\x03\x04")
        await asyncio.gather(wire.open(opening, 3, timeout=5), wire.open(opening, 4, timeout=5))
        return jammed, wire.jammed

    jammed, after = asyncio.run(main())
    assert (jammed, after) == (1, 0)
    assert most[0] == 1  # never two opens at once


def test_the_loop_runs_callers_threads_coroutines_and_restarts_after_close() -> None:
    loop = SshLoop()

    async def where() -> str:
        return threading.current_thread().name

    names = set()
    threads = [threading.Thread(target=lambda: names.add(loop.call(where()))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert names == {"cargoship-ssh"}  # one thread for all

    running = threading.Event()

    async def forever() -> None:
        running.set()
        await asyncio.sleep(3600)

    pending = loop.submit(forever())
    assert running.wait(5)
    loop.close()
    with pytest.raises(Exception) as ended:
        pending.result(5)
    assert type(ended.value).__name__ == "CancelledError"
    assert loop.call(where()) == "cargoship-ssh"  # a later run starts it again
    loop.close()


def test_a_call_cancelled_by_close_is_loop_closed() -> None:
    loop = SshLoop()
    started = threading.Event()

    async def forever() -> None:
        started.set()
        await asyncio.sleep(3600)

    errors: list[BaseException] = []

    def caller() -> None:
        try:
            loop.call(forever())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=caller)
    thread.start()
    assert started.wait(5)
    loop.close()
    thread.join(10)
    assert [type(e) for e in errors] == [LoopClosed]


def test_host_key_types_known_hosts_has_go_first() -> None:
    assert host_key_order(None)[0] == "ssh-ed25519"
    assert host_key_order("ecdsa-sha2-nistp256")[:2] == ["ecdsa-sha2-nistp256", "ssh-ed25519"]
    # An RSA entry: its SHA-2 signatures before the SHA-1 one, as OpenSSH offers them.
    assert host_key_order("ssh-rsa")[:3] == ["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"]
