"""The marker that says "an apply has this host's engine in its hands" (see
planner.facts.interrupted): set before the host is cordoned and its engine stopped,
cleared once the host is back in service or rolled back. A run that dies in between
leaves it, and the next plan recovers the host."""

from __future__ import annotations

import datetime
import json
import posixpath

from planner.facts.interrupted import MARKER
from planner.hosts.batch import quote

from .remote import HostWriter


def mark_script(plan_id: str, step: str = "in progress", backups: str | None = None) -> str:
    """The shell command that sets the marker. `step`: how far the apply got ("in
    progress", or "rolling back" once a failed change is being undone); `backups`: where
    the files from before it are, so that a run killed while rolling back leaves the next
    plan enough to restore them rather than restart the engine on the files that just
    failed."""
    since = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    body = json.dumps({"plan_id": plan_id, "since": since, "step": step, "backups": backups})
    m = quote(MARKER)
    d = quote(posixpath.dirname(MARKER))
    return (f"{{ [ -d {d} ] || mkdir -p {d}; }} && "
            f"printf '%s\\n' {quote(body)} > {m}.tmp && mv -f {m}.tmp {m}")


def mark(host: HostWriter, plan_id: str, step: str = "in progress",
         backups: str | None = None) -> None:
    """Set the marker in a command of its own (see mark_script)."""
    host.run_root(mark_script(plan_id, step, backups))


def clear_command() -> str:
    return f"rm -f {quote(MARKER)}"


def clear(host: HostWriter) -> None:
    host.run_root(clear_command())
