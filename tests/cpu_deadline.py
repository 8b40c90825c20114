"""A deadline in CPU time for a test's code: a hang is interrupted (SIGPROF) and fails the
test at once, rather than running for minutes before any assertion can speak.

CPU time, not wall time: on a loaded 2-core machine (lab hosts, other test workers) code
of milliseconds waited seconds for a core and tripped a wall-clock guard. A hang burns
CPU, so a CPU-time guard still catches it, whatever the load. The main thread only (where
Python runs signal handlers), as pytest runs tests.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class Overran(Exception):  # what the guard raises: never the code's own error
    pass


@contextmanager
def deadline(seconds: float, what: str) -> Iterator[None]:
    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise Overran(f"{what}: still running after {seconds:g} s of CPU (a hang)")

    previous = signal.signal(signal.SIGPROF, interrupt)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)
