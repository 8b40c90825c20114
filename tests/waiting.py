"""How a test waits for something to happen on a lab host, an API server or a process:
check, pause, check again, until a deadline. Never a sleep alone: a check that is already
true returns at once, and one that never becomes true fails the test at its deadline."""

from __future__ import annotations

import time
from collections.abc import Callable

Check = Callable[[], bool]


def until(check: Check, timeout: float, every: float = 0.05,
          what: str = "condition") -> None:
    """Return once check() is true; fail the test when it is still false after `timeout`
    seconds. `every`: the pause between checks, short enough to catch a state that lasts
    only a moment (a restart's gap, a watch event)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} not reached within {timeout:g} s"
        time.sleep(every)


def poller(timeout: float, every: float = 0.05) -> Callable[..., None]:
    """A test file's `poll(check, timeout=...)`: `until` with the file's own default
    deadline and pause."""
    default = timeout

    def poll(check: Check, timeout: float = default) -> None:
        until(check, timeout, every)

    return poll
