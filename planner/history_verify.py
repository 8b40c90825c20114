"""Which apply records `history` may believe.

A record is written by apply but kept on a host, and root on that host writes what it
likes: an invented plan "applied (current) by ..., signed by alice, bob", or the real
plan's record with its changes dropped. A host speaks for itself (its own status), never
for the cluster. So a plan is shown as verified only when:

* every record of it carries the plan's digest and hosts (older records do not: unverified);
* its records agree, outside what each host says of itself (`host`, `status`); a record
  that disagrees with a strict majority of the others is named as unverified and not used,
  and with no strict majority the plan is unverified;
* every host of the plan that this run read holds a record of it (unless apply said that
  host's record could not be written), and no host outside the plan holds one;
* no other plan id claims the same digest.

Signers are never the record's word: with an allowed-signers file, each signature the
record carries is verified over the plan's digest, and only those principals are shown.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

OWN = frozenset({"host", "status", "warnings", "records_missing_on"})


@dataclass
class Verdict:
    record: dict[str, Any]  # the plan's record as its hosts agree on it
    verified: bool
    why: list[str] = field(default_factory=list)
    dissent: list[str] = field(default_factory=list)  # hosts whose record is not believed
    holders: int = 0  # hosts whose record agrees with `record`


def plan_level(record: dict[str, Any]) -> str:
    """What every host's copy of one apply's record has in common, as canonical JSON."""
    return json.dumps({k: v for k, v in record.items() if k not in OWN}, sort_keys=True,
                      separators=(",", ":"))


def verify(records: dict[str, dict[str, Any]], read: set[str], in_progress: bool) -> Verdict:
    """`records`: host (address:port) -> its record of one plan; `read`: every host this
    run read. (A digest shared with another plan: shared_digests, once all are known.)"""
    why: list[str] = []
    groups: dict[str, list[str]] = {}
    for host, record in sorted(records.items()):
        groups.setdefault(plan_level(record), []).append(host)
    ranked = sorted(groups.values(), key=len, reverse=True)
    agreed, dissent = ranked[0], [h for group in ranked[1:] for h in group]
    if len(ranked) > 1 and len(ranked[0]) == len(ranked[1]):
        why.append("its records disagree and no majority agrees ("
                   + "; ".join(", ".join(g) for g in ranked) + ")")
    record = records[agreed[0]]
    digest, hosts = record.get("plan_digest"), record.get("plan_hosts")
    if not isinstance(digest, str) or not isinstance(hosts, list):
        why.append("its records carry no plan digest and hosts (written by an older "
                   "cargoship, or not by cargoship)")
        return Verdict(record, False, why, dissent, len(agreed))
    # A record is its host's text: a list of anything. Only strings can name a host, and
    # anything else in it must not stop the history of the others (unhashable in a set).
    hosts = [h for h in hosts if isinstance(h, str)]
    outsiders = sorted(h for h in agreed if h not in hosts)
    if outsiders:
        why.append(f"held by {', '.join(outsiders)}, which the plan does not name")
    missing = record.get("records_missing_on")
    missing_ok = {f"{h.get('address')}:{h.get('port')}"
                  for h in (missing if isinstance(missing, list) else []) if isinstance(h, dict)}
    lacking = sorted(h for h in hosts if h in read and h not in records
                     and h not in missing_ok)
    if lacking and not in_progress:  # a killed apply's journal is on its changing hosts
        why.append(f"no record of it on {', '.join(lacking)}, host(s) of the plan")
    return Verdict(record, not why, why, dissent, len(agreed))


def shared_digests(verdicts: dict[str, Verdict]) -> None:
    """A digest is one plan's: when records of several plan ids claim it (a real plan's
    digest and signatures copied into an invented record), the plan whose records are
    otherwise verified and held by strictly the most hosts keeps it, and the others are
    unverified; with no such single plan, all of them are. (Root on one host can write a
    record naming only itself as the plan's hosts; it cannot write one on the others.)"""
    owners: dict[str, list[str]] = {}
    for plan_id, verdict in verdicts.items():
        digest = verdict.record.get("plan_digest")
        if isinstance(digest, str):
            owners.setdefault(digest, []).append(plan_id)
    for plan_ids in owners.values():
        if len(plan_ids) < 2:
            continue
        sound = sorted((p for p in plan_ids if verdicts[p].verified),
                       key=lambda p: verdicts[p].holders, reverse=True)
        keeper = sound[0] if len(sound) == 1 or (
            len(sound) > 1 and verdicts[sound[0]].holders > verdicts[sound[1]].holders) \
            else None
        for plan_id in plan_ids:
            if plan_id == keeper:
                continue
            others = ", ".join(sorted(set(plan_ids) - {plan_id}))
            verdicts[plan_id].verified = False
            verdicts[plan_id].why.append(f"its digest is also claimed by plan(s) {others}")


def verified_signers(record: dict[str, Any],
                     check: Callable[[str, dict[str, Any]], str | None]) -> list[str]:
    """The principals whose signatures in the record verify over its plan digest
    (`check(digest, signature)` -> principal or None)."""
    digest = record.get("plan_digest")
    signatures = record.get("signatures")
    if not isinstance(digest, str) or not isinstance(signatures, list):
        return []
    found = {check(digest, s) for s in signatures if isinstance(s, dict)}
    return sorted(p for p in found if p)
