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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import history_verify
from .context import PlanContext
from .facts.interrupted import INTERRUPTED
from .host_paths import RECORD_DIR
from .hosts.batch import Fact, FactParseError, Output
from .plan.model import HostRef

MAX_RECORDS = 500


def _parse(out: Output) -> list[dict[str, Any]]:
    # What RECORDS prints at most: MAX_RECORDS lines, each the base64 of 64 KiB. More is
    # refused unread.
    line_limit = (65536 + 2) // 3 * 4
    if len(out.stdout) > MAX_RECORDS * (line_limit + 1):
        raise FactParseError(f"the apply records: the host printed more than {MAX_RECORDS} "
                             "records of 64 KiB; refused unread")
    records = []
    for line in out.stdout.splitlines():
        if len(line) > line_limit:
            raise FactParseError("an apply record is larger than the 64 KiB read of it")
        try:
            record = json.loads(base64.b64decode(line, validate=True))
        except (ValueError, binascii.Error, RecursionError):
            # RecursionError: json recurses once per level of nesting ("[" * 60000).
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
    # "applied (current)", "superseded", "failed", "interrupted", "in progress or killed",
    # "unverified"
    state: str = "applied"
    in_progress: bool = False  # its newest record is the journal written before a change
    verified: bool = True  # history_verify.py
    unverified_because: list[str] = field(default_factory=list)
    signatures: int = 0  # how many the record carries (verified or not)


SignatureCheck = Callable[[str, dict[str, Any]], "str | None"]


def collect(ctx: PlanContext, check: SignatureCheck | None = None) -> list[PlanHistory]:
    """Every plan the hosts hold a record of, newest first, each checked against its other
    records (history_verify.py); signers only as `check` verifies them."""
    held: dict[str, dict[str, tuple[HostRef, dict[str, Any], Any]]] = {}
    read: set[str] = set()
    for host, (records, marker) in ctx.gather("history", lambda _: [RECORDS, INTERRUPTED],
                                              as_root=True):
        key = f"{host.ref.address}:{host.ref.port}"
        read.add(key)
        for record in records:
            # The host is the one the record was read from (address and port); a record
            # names it as it was then.
            named = record.get("host")
            name = named.get("name") if isinstance(named, dict) else None
            ref = HostRef(str(name or host.ref.name), host.ref.address, host.ref.port)
            held.setdefault(str(record["plan_id"]), {})[key] = (ref, record, marker)
    verdicts = {plan_id: history_verify.verify(
        {key: record for key, (_, record, _) in copies.items()}, read,
        any(r.get("outcome") == "in progress" for _, r, _ in copies.values()))
        for plan_id, copies in held.items()}
    history_verify.shared_digests(verdicts)
    entries = [_entry(plan_id, copies, verdicts[plan_id], check, read)
               for plan_id, copies in held.items()]
    return _states(sorted(entries, key=lambda h: h.applied_at, reverse=True))


def _entry(plan_id: str, copies: dict[str, tuple[HostRef, dict[str, Any], Any]],
           verdict: history_verify.Verdict, check: SignatureCheck | None,
           read: set[str]) -> PlanHistory:
    record = verdict.record
    entry = PlanHistory(plan_id, str(record.get("applied_at", "?")),
                        str(record.get("applied_by", "?")),
                        history_verify.verified_signers(record, check) if check else [])
    for key, (ref, own, marker) in sorted(copies.items()):
        status = str(own.get("status", "unknown"))
        if status == "in progress" and marker is not None and marker.plan_id == plan_id:
            # How far it got on this host: the marker its restart left.
            status += f" (marker: {marker.step} since {marker.since}" + (
                f", backups in {marker.backups})" if marker.backups else ")")
        if key in verdict.dissent:
            status += " (this host's record disagrees with the others: unverified)"
        entry.outcomes[ref] = status
    if verdict.verified:  # an unverified record is one host's word on the others
        entry.outcomes.update(_not_held(record, copies, read))
    entry.interrupted = record.get("interrupted") is True
    entry.in_progress = record.get("outcome") == "in progress"
    changes = record.get("changes")
    entry.changes = [c for c in changes if isinstance(c, dict)] if isinstance(
        changes, list) else []
    seconds = record.get("duration_seconds")
    entry.duration_seconds = float(seconds) if isinstance(seconds, int | float) else None
    signatures = record.get("signatures")
    entry.signatures = len(signatures) if isinstance(signatures, list) else 0
    entry.verified, entry.unverified_because = verdict.verified, verdict.why
    return entry


def _not_held(record: dict[str, Any], copies: dict[str, Any],
              read: set[str]) -> dict[HostRef, str]:
    """The plan's hosts whose own record was not read (unreachable now, or none on the
    host), with the status the records that were read give them: a host that drops out of
    the list would read as never having been part of the plan."""
    found: dict[HostRef, str] = {}
    hosts = record.get("hosts")
    for item in hosts if isinstance(hosts, list) else []:
        named = item.get("host") if isinstance(item, dict) else None
        if not isinstance(named, dict):
            continue
        address, port, name = named.get("address"), named.get("port"), named.get("name")
        if not isinstance(address, str) or not isinstance(port, int) or isinstance(port, bool):
            continue
        key = f"{address}:{port}"
        if key in copies:
            continue
        why = "not read now" if key not in read else "its own record of this plan is missing"
        found[HostRef(str(name or address), address, port)] = \
            f"{item.get('status', 'unknown')} (as the other hosts' records say; {why})"
    return found


def _states(ordered: list[PlanHistory]) -> list[PlanHistory]:
    current_seen = False
    for entry in ordered:
        failed = any(s.split(" (")[0] not in ("applied", "unchanged")
                     for s in entry.outcomes.values()) or \
            any(c.get("status") == "failed" for c in entry.changes)
        if not entry.verified and not entry.in_progress:
            entry.state = "unverified"  # never current, never what superseded another
        elif entry.in_progress:
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
