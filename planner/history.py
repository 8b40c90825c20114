"""Apply history as the hosts remember it: the records each apply left on each host.

Read-only, like a plan: one round trip per host reads every record under the record
directory. A plan's lifetime shows as planned -> signed -> applied -> superseded: the
newest successful apply is the current one, every earlier one is superseded; an apply
stopped by Ctrl-C is `interrupted` until applying the plan again finishes it.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any

from .context import PlanContext
from .facts.interrupted import INTERRUPTED
from .hosts.batch import Fact, FactParseError, Output
from .plan.model import HostRef

RECORD_DIR = "/var/lib/cargoship/applied"
MAX_RECORDS = 500


def _parse(out: Output) -> list[dict[str, Any]]:
    records = []
    for line in out.stdout.splitlines():
        try:
            record = json.loads(base64.b64decode(line, validate=True))
        except (ValueError, binascii.Error):
            raise FactParseError("an apply record is not valid JSON") from None
        if isinstance(record, dict) and "plan_id" in record:
            records.append(record)
    return records


RECORDS: Fact[list[dict[str, Any]]] = Fact(
    "apply records",
    f"for f in $(ls -t {RECORD_DIR}/*.json 2>/dev/null | head -n {MAX_RECORDS}); do "
    "head -c 65536 \"$f\" | base64 -w0; echo; done",
    _parse,
)


@dataclass
class PlanHistory:
    plan_id: str
    applied_at: str
    applied_by: str
    signers: list[str]
    outcomes: dict[HostRef, str] = field(default_factory=dict)  # host -> status
    # What the apply did, every action (files, labels, the kubeconfig), from the newest
    # record of the plan: {"host", "action", "target", "status", "detail", "planned"}.
    changes: list[dict[str, Any]] = field(default_factory=list)
    interrupted: bool = False
    duration_seconds: float | None = None
    # "applied (current)", "superseded", "failed", "interrupted", "in progress or killed"
    state: str = "applied"
    in_progress: bool = False  # its newest record is the journal written before a change


def collect(ctx: PlanContext) -> list[PlanHistory]:
    found: dict[str, PlanHistory] = {}
    newest: dict[str, str] = {}
    for host, (records, marker) in ctx.gather("history", lambda _: [RECORDS, INTERRUPTED],
                                              as_root=True):
        for record in records:
            plan_id = str(record["plan_id"])
            entry = found.setdefault(plan_id, PlanHistory(
                plan_id, str(record.get("applied_at", "?")),
                str(record.get("applied_by", "?")), [str(s) for s in record.get("signers", [])]))
            # The host is the one the record was read from (address and port); a record
            # names it as it was then.
            named = record.get("host")
            name = named.get("name") if isinstance(named, dict) else None
            ref = HostRef(str(name or host.ref.name), host.ref.address, host.ref.port)
            status = str(record.get("status", "unknown"))
            if status == "in progress" and marker is not None and marker.plan_id == plan_id:
                # How far it got on this host: the marker its restart left.
                status += f" (marker: {marker.step} since {marker.since}" + (
                    f", backups in {marker.backups})" if marker.backups else ")")
            entry.outcomes[ref] = status
            at = str(record.get("applied_at", ""))
            if at >= newest.get(plan_id, ""):
                # A finished interrupted apply rewrote the records: the newest tells all.
                newest[plan_id] = at
                entry.applied_at, entry.applied_by = at or "?", str(record.get("applied_by",
                                                                               "?"))
                entry.interrupted = record.get("interrupted") is True
                entry.in_progress = record.get("outcome") == "in progress"
                changes = record.get("changes")
                entry.changes = [c for c in changes if isinstance(c, dict)] if isinstance(
                    changes, list) else []
                seconds = record.get("duration_seconds")
                entry.duration_seconds = float(seconds) if isinstance(
                    seconds, int | float) else None
    ordered = sorted(found.values(), key=lambda h: h.applied_at, reverse=True)
    current_seen = False
    for entry in ordered:
        failed = any(s not in ("applied", "unchanged") for s in entry.outcomes.values()) or \
            any(c.get("status") == "failed" for c in entry.changes)
        if entry.in_progress:
            # Nothing rewrote the journal: the apply still runs, or it was killed.
            entry.state = "in progress or killed"
        elif entry.interrupted:
            entry.state = "interrupted"
        elif failed:
            entry.state = "failed"
        elif not current_seen:
            entry.state = "applied (current)"
            current_seen = True
        else:
            entry.state = "superseded"
    return ordered
