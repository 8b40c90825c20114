"""The marker that says "an apply has this host's engine in its hands" (see
planner.facts.interrupted): set before the host is cordoned and its engine stopped,
cleared once the host is back in service or rolled back. A run that dies in between
leaves it, and the next plan recovers the host."""

from __future__ import annotations

import datetime
import json
import posixpath

from planner.facts.interrupted import MARKER
from planner.facts.lock_holder import GUARD, STATE_DIR
from planner.hosts.batch import quote

from .host_lock import UNSAFE
from .remote import HostWriter

assert posixpath.dirname(MARKER) == STATE_DIR, "the marker lives in the checked directory"


def mark_script(plan_id: str, step: str = "in progress", backups: str | None = None) -> str:
    """The shell command that sets the marker. `step`: how far the apply got ("in
    progress", or "rolling back" once a failed change is being undone); `backups`: where
    the files from before it are, so that a run killed while rolling back leaves the next
    plan enough to restore them rather than restart the engine on the files that just
    failed.

    The marker decides what the next plan does to the host (a drain and a restart), so its
    directory must be root's alone: checked first (planner.facts.lock_holder.GUARD), created 0700
    when absent, refused (nothing written) when anyone else could have put or changed
    anything there."""
    since = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    body = json.dumps({"plan_id": plan_id, "since": since, "step": step, "backups": backups})
    m = quote(MARKER)
    return (f"umask 077\n{GUARD}"
            f"if ! cs_dir {quote(STATE_DIR)} fix fd; then "
            f'echo "$why; nothing was changed" >&2; exit {UNSAFE}; fi\n'
            f"printf '%s\\n' {quote(body)} > {m}.tmp && mv -f {m}.tmp {m}")


def mark(host: HostWriter, plan_id: str, step: str = "in progress",
         backups: str | None = None) -> None:
    """Set the marker in a command of its own (see mark_script)."""
    host.run_root(mark_script(plan_id, step, backups))


def clear_command() -> str:
    # Never through a link put in the directory's place (mark_script refuses one).
    return f"[ -L {quote(STATE_DIR)} ] || rm -f {quote(MARKER)}"


def clear(host: HostWriter) -> None:
    host.run_root(clear_command())
