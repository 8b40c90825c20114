"""Sessions begun before the phases exist: phase 1 takes each session (or its error) once;
whatever the run ends without taking is closed, even a handshake still running then; at
most `limit` handshakes at a time."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from planner.errors import ConnectError
from planner.hosts.early import EarlySessions
from planner.hosts.loop import SshLoop


class FakeSession:
    def __init__(self, label: str) -> None:
        self.label = label
        self.closed = threading.Event()

    def close(self) -> None:
        self.closed.set()


def test_each_host_is_taken_once_with_its_session_or_its_error() -> None:
    loop = SshLoop()

    async def opener(index: int, handshakes: asyncio.Semaphore) -> Any:
        if index == 1:
            raise ConnectError("h1", "cannot connect to h1: connection refused")
        return FakeSession(f"h{index}")

    early = EarlySessions(3, opener, limit=2, loop=loop)
    first = early.claim(0)
    assert first is not None and first.result(5).label == "h0"
    second = early.claim(1)
    assert second is not None
    with pytest.raises(ConnectError, match="connection refused"):
        second.result(5)
    assert early.claim(0) is None  # claimed already
    assert early.claim(7) is None  # never begun here
    early.close()
    loop.close()


def test_what_the_run_never_took_is_closed_even_if_still_running() -> None:
    loop = SshLoop()
    release, running = threading.Event(), threading.Event()
    opened: list[FakeSession] = []
    at_once = [0, 0]  # now, most

    async def opener(index: int, handshakes: asyncio.Semaphore) -> Any:
        async with handshakes:
            at_once[0] += 1
            at_once[1] = max(at_once)
            running.set()
            session = FakeSession(f"h{index}")
            opened.append(session)
            while index == 0 and not release.is_set():
                await asyncio.sleep(0.01)  # a handshake still running when the run ends
            at_once[0] -= 1
            return session

    early = EarlySessions(3, opener, limit=1, loop=loop)
    assert running.wait(10)
    early.close()
    release.set()
    assert opened[0].closed.wait(10), "the running handshake's session was left open"
    assert all(s.closed.wait(10) for s in opened[1:])
    assert at_once[1] == 1  # the limit held
    loop.close()
