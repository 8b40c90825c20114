"""HostWriter reconnects when a command loses its connection (executor/remote.py); the lab
shows it end to end (tests/reliability/test_fault_ssh.py), this pins the rules."""

from __future__ import annotations

import pytest

from executor.remote import MAX_RERUNS
from planner.errors import CommandTimeout, ConnectError, ConnectionLost, HostKeyError
from tests.unit.fakes import FakeSession, writer


def test_a_lost_connection_is_redialled_and_the_command_run_again() -> None:
    first = FakeSession([ConnectionLost("wrk-1", "SSH connection lost")])
    second = FakeSession([])
    w = writer(first, lambda: second)
    assert w.run_root("sv up x").stdout == b"ok"
    assert first.closed and len(second.commands) == 1 and w.reconnections == 1


def test_a_timeout_is_treated_as_a_possibly_dead_link() -> None:
    second = FakeSession([])
    w = writer(FakeSession([CommandTimeout("wrk-1", "timed out")]), lambda: second)
    w.run_root("true")
    assert second.commands


def test_without_redial_the_error_stands() -> None:
    w = writer(FakeSession([ConnectionLost("wrk-1", "gone")]), None)
    with pytest.raises(ConnectionLost):
        w.run_root("true")


def test_a_changed_host_key_on_reconnect_is_never_retried() -> None:
    calls = []

    def dial() -> FakeSession:
        calls.append(1)
        raise HostKeyError("wrk-1", "host key is SHA256:other")

    w = writer(FakeSession([ConnectionLost("wrk-1", "gone")]), dial)
    with pytest.raises(HostKeyError):
        w.run_root("true")
    assert len(calls) == 1


def test_reconnecting_gives_up_after_the_window_with_one_message() -> None:
    def dial() -> FakeSession:
        raise ConnectError("wrk-1", "cannot connect: timed out after 2s")

    w = writer(FakeSession([ConnectionLost("wrk-1", "SSH connection lost")]), dial, within=0.2)
    with pytest.raises(ConnectionLost) as exc:
        w.run_root("true")
    assert str(exc.value) == ("wrk-1: SSH connection lost, and reconnecting failed for 0.2s: "
                              "cannot connect: timed out after 2s")


def test_a_connection_that_keeps_dropping_is_given_up() -> None:
    def dial() -> FakeSession:
        return FakeSession([ConnectionLost("wrk-1", "again")])

    w = writer(FakeSession([ConnectionLost("wrk-1", "gone")]), dial)
    with pytest.raises(ConnectionLost):
        w.run_root("true")
    assert w.reconnections == MAX_RERUNS


def test_after_a_window_without_a_connection_each_later_command_dials_once() -> None:
    """A host gone for a whole reconnect window costs each later step (a rollback's, the
    apply record) one dial, not another window; one that came back is used again."""
    dials: list[float] = []
    back = FakeSession([])

    def dial() -> FakeSession:
        dials.append(1)
        if len(dials) > 4:
            return back
        raise ConnectError("wrk-1", "cannot connect: timed out after 2s")

    w = writer(FakeSession([ConnectionLost("wrk-1", "SSH connection lost")]), dial,
               within=0.2)
    with pytest.raises(ConnectionLost):
        w.run_root("true")
    in_window = len(dials)
    assert in_window >= 1
    with pytest.raises(ConnectionLost) as exc:
        w.run_root("true")
    assert len(dials) == in_window + 1
    assert "reconnecting failed again (one try: no connection within the 0.2s reconnect " \
           "window before): cannot connect: timed out after 2s" in str(exc.value)
    while len(dials) < 4:  # (the window's attempts depend on the clock)
        with pytest.raises(ConnectionLost):
            w.run_root("true")
    assert w.run_root("true").stdout == b"ok" and back.commands  # back: used again
