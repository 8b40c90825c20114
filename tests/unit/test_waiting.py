"""The tests' one way of waiting (tests/waiting.py): it returns as soon as the check is
true, and a check that never is fails the test at the deadline, saying what it waited for."""

from __future__ import annotations

import pytest

from tests import waiting
from tests.waiting import poller, until


def test_a_true_check_returns_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_sleep(seconds: float) -> None:
        raise AssertionError(f"slept {seconds} s before a check that was already true")

    monkeypatch.setattr(waiting.time, "sleep", no_sleep)
    calls: list[int] = []
    until(lambda: calls.append(1) is None, timeout=0.0, every=10.0)
    assert calls == [1]


def test_a_check_that_turns_true_is_seen_at_the_next_look() -> None:
    looks = iter([False, False, True])
    until(lambda: next(looks), timeout=5.0, every=0.001)
    assert next(looks, "done") == "done"


def test_a_check_never_true_fails_at_the_deadline_saying_what() -> None:
    with pytest.raises(AssertionError, match=r"^the lock not reached within 0\.05 s$"):
        until(lambda: False, timeout=0.05, every=0.01, what="the lock")


def test_a_files_poll_keeps_its_default_deadline_and_takes_another() -> None:
    poll = poller(timeout=0.03, every=0.01)
    with pytest.raises(AssertionError, match=r"within 0\.03 s"):
        poll(lambda: False)
    with pytest.raises(AssertionError, match=r"within 0\.02 s"):
        poll(lambda: False, timeout=0.02)
