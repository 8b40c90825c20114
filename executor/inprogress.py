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


def mark(host: HostWriter, plan_id: str) -> None:
    since = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    body = json.dumps({"plan_id": plan_id, "since": since})
    m = quote(MARKER)
    host.run_root(f"mkdir -p {quote(posixpath.dirname(MARKER))} && "
                  f"printf '%s\\n' {quote(body)} > {m}.tmp && mv -f {m}.tmp {m}")


def clear(host: HostWriter) -> None:
    host.run_root(f"rm -f {quote(MARKER)}")
