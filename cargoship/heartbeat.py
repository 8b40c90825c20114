"""Progress lines for logs: while a plan runs with stdout not on a terminal (CI, a pipe),
a line on stderr every few seconds says what it is doing, so a plan of a large or half
unreachable fleet never looks hung. On a terminal, plans stay quiet until they report."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from planner.render import printable
from planner.threads import start

INTERVAL = 5.0  # seconds: well inside the 10 s a CI log may go without a line


@contextmanager
def heartbeat(out: TextIO, activity: Callable[[], str], enabled: bool,
              interval: float = INTERVAL) -> Iterator[None]:
    if not enabled:
        yield
        return
    started = time.monotonic()
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(interval):
            try:
                out.write(f"cargoship: {time.monotonic() - started:.0f}s, "
                          f"{printable(activity())}\n")
                out.flush()
            except (BrokenPipeError, ValueError):  # the reader left, or stderr closed
                return

    thread = start(beat, name="cargoship-heartbeat")
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=1)
