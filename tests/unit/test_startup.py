"""A plan's start-up figures: to the first dial, and to the phases loaded (the imports made
while the handshakes run included, the handshakes' own CPU not)."""

from __future__ import annotations

import re
import socket
import threading
import time
from pathlib import Path

from planner.startup import imports_done, since_process_start
from tests.e2e.cli import cargoship
from tests.unit.test_plan_imports import _refusing_config


def _burn(seconds: float) -> None:
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


def test_the_phases_loaded_figure_counts_this_threads_imports_and_nothing_else() -> None:
    first = since_process_start()
    _burn(0.3)  # every handshake's setup, before the mark: per host, not start-up
    dial = first.marked()
    other = threading.Thread(target=_burn, args=(0.3,))  # as the handshakes' thread would
    other.start()
    other.join()
    _burn(0.05)  # this thread's own imports
    loaded = imports_done(dial)
    assert 0.05 <= loaded.cpu - dial.cpu < 0.2
    assert dial.cpu == first.cpu and loaded.wall >= dial.wall


def test_plan_stats_prints_both_start_up_figures(tmp_path: Path) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, not listening: the host refuses at once
        # The installed script itself: a command forked from the tests' zygote has the
        # phases imported already, so its CPU from the dial to the phases loaded is under a
        # millisecond, and the two figures, printed to the millisecond, were once equal.
        result = cargoship("plan", "-c", _refusing_config(tmp_path, closed), "--stats",
                           exec_=True)
    assert result.returncode == 1 and "connection refused" in result.stdout
    figures = {}
    for when in ("before the first dial", "to the phases loaded"):
        found = re.search(rf"start-up {when}: ([\d.]+) s wall, ([\d.]+) s CPU", result.stdout)
        assert found, result.stdout
        figures[when] = (float(found[1]), float(found[2]))
    dial, loaded = figures["before the first dial"], figures["to the phases loaded"]
    # The phases' imports come after the first dial: they add to start-up.
    assert loaded[0] > dial[0] and loaded[1] > dial[1]
