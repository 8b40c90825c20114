"""Applying a plan again: what the records of earlier runs of it, found on its hosts, allow.

A plan is applied once. The records on its hosts are how a second apply knows: any record
of a run that was not interrupted means it was applied ("make a new plan"). Every record
interrupted: the run may be finished, unless it left a host in a state no drift check can
vouch for (failed, rolled back, in progress: anything but applied, unchanged or not
started). Finishing it skips the hosts it applied and the changes it did, and the newest
record says it was resumed.

Pure: the caller reads the records (apply.py); nothing here touches a host.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from planner.plan.model import HostRef
from planner.safetext import tcp_port

from .actions.base import ApplyRefused
from .drift import ChangeKey, HostKey

# A host in one of these states after an interrupted run can be finished by another.
RESUMABLE = ("applied", "unchanged", "not started")


@dataclass(frozen=True)
class Earlier:
    """What an interrupted apply of this plan already did."""

    finished: frozenset[HostKey] = frozenset()
    done: frozenset[ChangeKey] = frozenset()
    record: dict[str, Any] | None = None


def judge(plan_id: str, found: Mapping[HostKey, dict[str, Any]]) -> Earlier:
    """`found`: each host's record of plan `plan_id`, for the hosts that have one. What an
    earlier run did, or ApplyRefused when this plan must not be applied again."""
    if not found:
        return Earlier()
    names = ", ".join(name(r, k) for k, r in found.items())
    if not all(r.get("interrupted") is True for r in found.values()):
        raise ApplyRefused(f"plan {plan_id} was already applied (records on {names}); "
                           "make a new plan")
    broken = [f"{name(r, k)} {r.get('status')}" for k, r in found.items()
              if r.get("status") not in RESUMABLE]
    if broken:
        raise ApplyRefused(
            f"plan {plan_id} was interrupted and can't be finished: in that run "
            f"{', '.join(broken)}; nothing was changed. Make a new plan (cargoship plan -c "
            "CLUSTER.yaml -out PLAN.json) and apply that")
    finished = frozenset(k for k, r in found.items() if r.get("status") == "applied")
    newest = max(found.values(), key=lambda r: str(r.get("applied_at")))
    return Earlier(finished, _done(found.values()), newest)


def _done(found: Iterable[dict[str, Any]]) -> frozenset[ChangeKey]:
    """The changes the records say were done. A record is its host's text: an entry that
    is not a change, or names a host by no address and port, claims nothing (and the drift
    check still holds every change said done to the host's state)."""
    done: set[ChangeKey] = set()
    for record in found:
        changes = record.get("changes")
        for c in changes if isinstance(changes, list) else []:
            if not isinstance(c, dict) or c.get("status") != "done":
                continue
            at = key(c.get("host"))
            if at is None and c.get("host") is not None:
                continue
            done.add((at, str(c.get("action")), str(c.get("target"))))
    return frozenset(done)


def key(host: Any) -> HostKey | None:
    """A record's host object as drift.py keys hosts (None: the local machine, or an
    object that names no host: an address and a port, as a number or its digits)."""
    if not isinstance(host, dict) or not isinstance(host.get("address"), str):
        return None
    number = tcp_port(host.get("port"))
    return (host["address"], number) if number is not None else None


def name(record: dict[str, Any], at: HostKey) -> str:
    """The host a record was found on, for people: its name from the record when it has
    one, its address and port always from where it was found."""
    host = record.get("host")
    if isinstance(host, dict):
        return str(HostRef(str(host.get("name")), at[0], at[1]))
    return f"{at[0]}:{at[1]}"
