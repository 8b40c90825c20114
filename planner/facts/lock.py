"""The exclusive host lock as the planner sees it: who holds it and how fresh it is.

The executor creates and touches the lock; a plan only reads it, to warn when another run
holds it. A lock untouched for more than STALE_AFTER seconds may be taken over.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from ..hosts.batch import Fact, FactParseError, Output, quote

# On tmpfs, so a reboot clears a crashed run's lock; mode 0644 (it holds no secret) so that
# a plan reads it without sudo.
LOCK_PATH = "/run/cargoship/lock"
TOUCH_EVERY = 30
STALE_AFTER = 60
# Held (flock, exclusive) by an engine restart's remote script from before it stops the
# engine until it has asked for the start: the files are changing. A host snapshot waits
# for it (shared), so a plan never reads a host halfway through a change whose client died
# (the script finishes the change on its own). Mode 0644, for a plan without sudo.
SWAP_LOCK_PATH = "/run/cargoship/swap.lock"


@dataclass(frozen=True)
class LockState:
    holder: dict[str, Any] | None  # None: no lock file
    age: float  # seconds since the lock was last touched (host clock)

    @property
    def live(self) -> bool:
        return self.holder is not None and self.age <= STALE_AFTER

    def describe(self) -> str:
        if self.holder is None:
            return "not locked"
        h = self.holder
        return (f"{h.get('holder', '?')} (lock {h.get('id', '?')}, plan {h.get('plan_id', '?')}, "
                f"pid {h.get('pid', '?')}, since {h.get('since', '?')}, "
                f"touched {self.age:.0f}s ago)")


def _parse(out: Output) -> LockState:
    lines = out.stdout.splitlines()
    if lines[:1] == ["none"]:
        return LockState(None, 0.0)
    head = lines[0].split() if lines else []
    if len(head) != 3 or head[0] != "lock" or len(lines) < 2:
        raise FactParseError("unreadable lock file listing")
    try:
        age = float(head[2]) - float(head[1])
        holder = json.loads(base64.b64decode(lines[1], validate=True))
    except (ValueError, binascii.Error):
        # A corrupt lock still locks: report it as held by an unknown run.
        return LockState({"holder": "unknown (corrupt lock file)"}, float(head[2]) -
                         float(head[1]) if head[1:] else 0.0)
    if not isinstance(holder, dict):
        holder = {"holder": "unknown (corrupt lock file)"}
    return LockState(holder, age)


LOCK: Fact[LockState] = Fact(
    "lock",
    f"p={quote(LOCK_PATH)}; if [ -f \"$p\" ]; then "
    "echo \"lock $(stat -c %Y \"$p\") $(date +%s)\"; head -c 4096 \"$p\" | base64 -w0; echo; "
    "else echo none; fi",
    _parse,
)
