"""What a run waiting for another run's lock shows, without -v: who holds it, since when,
and how long it will still wait. On a terminal one line counts down in place; in a log
(CI) a line every few seconds, at most every 10 s."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from executor.host_lock import LockHeld
from planner.render import printable


class LockWait:
    def __init__(self, timeout: float, out: TextIO = sys.stderr, live: bool | None = None,
                 ) -> None:
        self._out = out
        self._live = out.isatty() if live is None else live
        self._every = max(1.0, min(10.0, timeout / 5))
        self._last: float | None = None
        self._waited_for: str | None = None

    def __call__(self, held: LockHeld, remaining: float) -> None:
        now = time.monotonic()
        holder = held.state.holder or {}
        text = (f"waiting for the lock of {held.host}: held by {holder.get('holder', '?')} "
                f"(lock {holder.get('id', '?')}, plan {holder.get('plan_id', '?')}) since "
                f"{holder.get('since', '?')}; {remaining:.0f}s left")
        first = held.lock_id != self._waited_for
        if self._live:
            self._out.write("\r\x1b[2K" + printable(text))
        elif first or self._last is None or now - self._last >= self._every - 0.05:
            self._out.write(printable(text) + "\n")
        else:
            return
        self._waited_for = held.lock_id
        self._last = now
        self._out.flush()

    def done(self) -> None:
        if self._live and self._last is not None:
            self._out.write("\n")
            self._out.flush()
