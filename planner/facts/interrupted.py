"""Whether an apply was interrupted on a host while it had the engine in its hands.

The executor writes MARKER before it cordons and stops a host's engine and removes it once
the host is back (or rolled back). A marker found by a later plan means a run died in
between (SIGKILL, power loss, a lost host): the engine may be stopped and the node
cordoned, whatever the files say, so the sync phase plans to recover the host.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..hosts.batch import Fact, Output, quote

MARKER = "/var/lib/cargoship/in-progress.json"
MAX_BYTES = 4096  # what the command reads of the marker; the executor writes ~200 bytes

# Used with fullmatch: a literal and one fixed-width class, nothing to backtrack over.
BACKUPS = re.compile(r"/var/lib/cargoship/backups/[0-9a-f]{32}")


@dataclass(frozen=True)
class Interrupted:
    plan_id: str  # the plan whose apply left the marker ("unknown" if unreadable)
    since: str
    step: str = "in progress"  # "rolling back": the files in place are the ones that failed
    backups: str | None = None  # where that apply kept the files from before it

    @property
    def rolling_back(self) -> bool:
        return self.step == "rolling back" and self.backups is not None


def _parse(out: Output) -> Interrupted | None:
    text = out.stdout.strip()
    if text == "none" or not text:
        return None
    if len(text) > MAX_BYTES:
        # More than the command reads: not this command's output. Still a marker found.
        return Interrupted("unknown", "unknown")
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise TypeError("not an object")
        backups = data.get("backups")
        return Interrupted(str(data["plan_id"])[:64], str(data["since"])[:40],
                           str(data.get("step") or "in progress")[:40],
                           # Only a directory of ours: a marker is a host's word.
                           backups if isinstance(backups, str) and BACKUPS.fullmatch(backups)
                           else None)
    except (ValueError, KeyError, TypeError, RecursionError):
        # Unreadable still means a run stopped midway: recover rather than trust the files.
        # (json.loads recurses once per level: 4096 bytes of "[" is a RecursionError.)
        return Interrupted("unknown", "unknown")


INTERRUPTED: Fact[Interrupted | None] = Fact(
    "interrupted", f"if [ -f {quote(MARKER)} ]; then head -c {MAX_BYTES} {quote(MARKER)}; echo; "
                   "else echo none; fi", _parse)
