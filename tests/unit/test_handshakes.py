"""Handshakes begun before the phases exist: phase 1 takes each session (or its error) once;
whatever the run ends without taking is closed, even a handshake still running then."""

from __future__ import annotations

import threading

import pytest

from planner.errors import ConnectError
from planner.hosts.handshakes import Handshakes


class FakeSession:
    def __init__(self, label: str) -> None:
        self.label = label
        self.closed = threading.Event()

    def close(self) -> None:
        self.closed.set()


def test_each_host_is_taken_once_with_its_session_or_its_error() -> None:
    def opener(index: int) -> FakeSession:
        if index == 1:
            raise ConnectError("h1", "cannot connect to h1: connection refused")
        return FakeSession(f"h{index}")

    handshakes = Handshakes(3, opener, limit=2)  # type: ignore[arg-type]
    first = handshakes.claim(0)
    assert first is not None and first.result(5).label == "h0"
    second = handshakes.claim(1)
    assert second is not None
    with pytest.raises(ConnectError, match="connection refused"):
        second.result(5)
    assert handshakes.claim(0) is None  # claimed already
    assert handshakes.claim(7) is None  # never begun here
    handshakes.close()


def test_what_the_run_never_took_is_closed_even_if_still_running() -> None:
    release, running = threading.Event(), threading.Event()
    opened: list[FakeSession] = []
    started: list[int] = []

    def opener(index: int) -> FakeSession:
        started.append(index)
        running.set()
        session = FakeSession(f"h{index}")
        opened.append(session)
        if index == 0:
            release.wait(10)  # a handshake still running when the run ends
        return session

    handshakes = Handshakes(3, opener, limit=1)  # type: ignore[arg-type]
    assert running.wait(10)
    handshakes.close()
    release.set()
    assert opened[0].closed.wait(10), "the running handshake's session was left open"
    assert started == [0]  # the two still queued were dropped, never opened
