"""Apply history as the hosts remember it: the records each apply left on each host.

Read-only, like a plan: one round trip per host reads every record under the record
directory. A plan's lifetime shows as planned -> signed -> applied -> superseded: the
newest successful apply is the current one, every earlier one is superseded.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any

from .context import PlanContext
from .hosts.batch import Fact, FactParseError, Output

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
    outcomes: dict[str, str] = field(default_factory=dict)  # host -> status
    state: str = "applied"  # "applied (current)", "superseded", "failed"


def collect(ctx: PlanContext) -> list[PlanHistory]:
    found: dict[str, PlanHistory] = {}
    for host, (records,) in ctx.gather("history", lambda _: [RECORDS], as_root=True):
        for record in records:
            entry = found.setdefault(record["plan_id"], PlanHistory(
                record["plan_id"], str(record.get("applied_at", "?")),
                str(record.get("applied_by", "?")), list(record.get("signers", []))))
            # The name the host had when it was applied (its label now may be bare).
            name = str(record.get("host") or host.label)
            entry.outcomes[name] = str(record.get("status", "unknown"))
    ordered = sorted(found.values(), key=lambda h: h.applied_at, reverse=True)
    current_seen = False
    for entry in ordered:
        failed = any(s not in ("applied", "unchanged") for s in entry.outcomes.values())
        if failed:
            entry.state = "failed"
        elif not current_seen:
            entry.state = "applied (current)"
            current_seen = True
        else:
            entry.state = "superseded"
    return ordered
