"""Apply progress for people: a live per-host status block on a terminal, plain
timestamped lines anywhere else (CI logs, pipes, files)."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from planner.render import printable


class Progress:
    def __init__(self, out: TextIO = sys.stdout, live: bool | None = None) -> None:
        self._out = out
        self._live = out.isatty() if live is None else live
        self._started = time.monotonic()
        self._hosts: dict[str, tuple[str, float]] = {}  # host -> (step, since)
        self._drawn = 0
        self._lock = threading.Lock()
        self._gone = False

    def __call__(self, host: str, what: str) -> None:
        # Steps quote hosts' errors: control characters there must not steer the terminal.
        host, what = printable(host), printable(what)
        now = time.monotonic()
        with self._lock:
            if self._gone:
                return
            try:
                if not self._live:
                    self._out.write(f"{now - self._started:7.1f}s  [{host}] {what}\n")
                else:
                    self._hosts[host] = (what, self._hosts.get(host, (what, now))[1])
                    self._redraw(now)
                self._out.flush()
            except OSError:
                # `apply ... | head`: the reader left; or the terminal closed (SIGHUP, then
                # EIO). An apply must not stop half-way for that; it goes on without
                # progress lines (the record says what happened).
                self._gone = True

    def _redraw(self, now: float) -> None:
        # Move up over the block drawn last time and draw it again, one line per host.
        if self._drawn:
            self._out.write(f"\x1b[{self._drawn}F")
        for host, (step, since) in self._hosts.items():
            self._out.write(f"\x1b[2K  {host:<28} {now - since:6.1f}s  {step}\n")
        self._drawn = len(self._hosts)
