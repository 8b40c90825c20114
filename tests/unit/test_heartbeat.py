"""Progress lines while a plan runs with stdout off a terminal."""

from __future__ import annotations

import io
import time

from cargoship.heartbeat import heartbeat


def test_lines_come_while_the_work_runs_and_stop_with_it() -> None:
    out = io.StringIO()
    activity = ["phase 1/12: Connect to hosts: 3 of 500 host(s) connected, 0 failed"]
    with heartbeat(out, lambda: activity[0], enabled=True, interval=0.01):
        deadline = time.monotonic() + 10
        while out.getvalue().count("\n") < 2:
            assert time.monotonic() < deadline, "no progress lines"
            time.sleep(0.005)
        activity[0] = "phase 7/12: \x1b[2JSync"  # a host-controlled name must not steer
        while "Sync" not in out.getvalue():
            assert time.monotonic() < deadline, "activity not followed"
            time.sleep(0.005)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("cargoship: 0s, phase 1/12: Connect to hosts: 3 of 500")
    assert "\x1b" not in out.getvalue()
    after = out.getvalue()
    time.sleep(0.05)  # the thread is gone: nothing more is written
    assert out.getvalue() == after


def test_nothing_on_a_terminal() -> None:
    out = io.StringIO()
    with heartbeat(out, lambda: "x", enabled=False, interval=0.001):
        time.sleep(0.02)
    assert out.getvalue() == ""
