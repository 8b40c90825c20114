"""What an apply says of itself: its result (ApplyResult), the record made of it
(record_of), written on every host about to change and next to the plan as "in progress"
before the first change (write_journal), then as the outcome at the end (write_records).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner import __version__
from planner.errors import CargoshipError
from planner.facts.lock_holder import whoami
from planner.hosts.batch import quote
from planner.plan.codec import plan_digest
from planner.plan.model import Change, HostRef, Plan, Signature
from planner.threads import Executor

from . import records
from .actions.base import ApplyEnv, ApplyRefused, ItemResult
from .host_job import HostJob, HostOutcome

RECORD_VERSION = "2.0"


@dataclass
class ApplyResult:
    plan: Plan
    hosts: list[tuple[HostRef, HostOutcome]] = field(default_factory=list)
    items: list[ItemResult] = field(default_factory=list)
    after_rollout: list[ItemResult] = field(default_factory=list)  # the cluster stage's
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # for the operator, after the outcomes
    interrupted: bool = False
    record: Path | None = None
    seconds: float = 0.0
    resumed: bool = False  # finished the hosts an interrupted apply of this plan left
    signers: tuple[str, ...] = ()  # verified principals (apply --require-signed-by)
    signum: int | None = None  # the signal that interrupted it (SIGINT, SIGTERM, SIGHUP)
    # Detached signatures the caller counted (embedded ones are the plan's own).
    signatures: tuple[Signature, ...] = ()

    @property
    def outcomes(self) -> list[HostOutcome]:
        return [outcome for _, outcome in self.hosts]

    @property
    def ok(self) -> bool:
        return not self.interrupted and all(o.status in ("applied", "unchanged")
                                            for o in self.outcomes) and \
            all(i.status in ("done", "unchanged") for i in self.items)

    @property
    def restarts(self) -> int:
        """Engine restarts this apply made, as they happened: a rollback's included."""
        return sum(outcome.restarts for outcome in self.outcomes)

    @property
    def outcome(self) -> str:
        return "applied" if self.ok else ("interrupted" if self.interrupted else "failed")

def _ref(host: HostRef | None) -> dict[str, Any] | None:
    return None if host is None else {"name": host.name, "address": host.address,
                                      "port": host.port}


def record_of(plan: Plan, result: ApplyResult) -> dict[str, Any]:
    at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return {
        "record_version": RECORD_VERSION, "plan_id": plan.plan_id, "cluster": plan.cluster,
        "applied_by": whoami(), "applied_at": at, "cargoship_version": __version__,
        "outcome": result.outcome, "ok": result.ok, "interrupted": result.interrupted,
        "resumed": result.resumed, "duration_seconds": result.seconds,
        "restarts": result.restarts,
        "hosts": [{"host": _ref(ref), "status": o.status, "detail": o.detail,
                   "restarts": o.restarts, **({"log": list(o.log)} if o.log else {})}
                  for ref, o in result.hosts],
        "changes": [{"host": _ref(i.item.host), "action": i.item.action,
                     "target": i.item.target if isinstance(i.item, Change) else None,
                     "planned": isinstance(i.item, Change),
                     "status": i.status, "detail": i.detail} for i in result.items],
        "notes": result.notes,
        # Principals an allowed-signers file vouched for at this apply, nothing else: a
        # signature's key comment is whatever its maker typed.
        "signers": sorted(result.signers),
        # What lets `history` check a record instead of believing it: the plan's digest,
        # its hosts and its signatures (each verifiable over the digest, by anyone with an
        # allowed-signers file). A record on one host that disagrees with these is shown
        # as unverified (planner/history_verify.py).
        "plan_digest": plan_digest(plan),
        "plan_hosts": [f"{h.address}:{h.port}" for h in plan.hosts],
        "signatures": [{"key": s.key, "signed_at": s.signed_at, "signature": s.signature}
                       for s in (*plan.signatures, *result.signatures)],
    }


def write_journal(plan: Plan, plan_file: Path, env: ApplyEnv,
                  jobs: dict[str, list[HostJob]], result: ApplyResult) -> None:
    """Before the first change, a record that says "in progress" on every host about to
    change and next to the plan: an apply killed (SIGKILL, power loss) leaves `history`
    and `show` that much, and the host's in-progress marker (set before its engine is
    touched) says how far it got. The records of a run that ends replace it. A host that
    can't take it refuses the apply: nothing was changed yet."""
    changing = {job.label for role in jobs.values() for job in role}
    record = record_of(plan, result)
    record.update(outcome="in progress", ok=False, interrupted=True)
    del record["restarts"]  # not known until the run ends (if it does)
    record["hosts"] = [{"host": _ref(h.ref), "detail": "",
                        "status": "in progress" if h.label in changing else "unchanged"}
                       for h in env.ctx.hosts]
    record["changes"] = [{"host": _ref(c.host), "action": c.action, "target": c.target,
                          "planned": True, "status": "in progress", "detail": ""}
                         for c in plan.changes]
    hosts = [h for h in env.ctx.hosts if h.label in changing]

    def write(host: Any) -> str | None:
        try:
            records.write_host_record(env.writers[host.ref.key], plan.plan_id,
                                      {**record, "host": _ref(host.ref),
                                       "status": "in progress"})
        except CargoshipError as exc:
            return f"{host.label}: {exc}"
        return None

    with Executor(max_workers=max(1, min(32, len(hosts))),
                  thread_name_prefix="cargoship-journal") as pool:
        outcomes = list(pool.map(write, hosts))
        failed = [f for f in outcomes if f is not None]
        if failed:
            # No host may keep the journal of an apply that never began.
            written = [h for h, f in zip(hosts, outcomes, strict=True) if f is None]
            list(pool.map(lambda h: env.writers[h.ref.key].run_root(
                f"rm -f {quote(records.record_path(plan.plan_id))}", check=False), written))
    if failed:
        raise ApplyRefused("could not write the in-progress record before the first "
                           "change; nothing was changed: " + "; ".join(failed))
    try:
        records.write_local_record(plan_file, record)
    except CargoshipError as exc:
        result.warnings.append(f"could not write the local in-progress record: {exc}; the "
                               "hosts keep theirs")


def write_records(plan: Plan, plan_file: Path, env: ApplyEnv, result: ApplyResult) -> None:
    record = record_of(plan, result)
    # Records are never lost together: a local record that can't be written must not cost
    # the hosts theirs (nor the operator the outcome), and a host that can't take its
    # record must not cost the others or the local one.
    try:
        result.record = records.write_local_record(plan_file, record)
    except CargoshipError as exc:
        result.warnings.append(f"could not write the local apply record: {exc}; the hosts "
                               "keep theirs (cargoship history)")
    missing = []
    for ref, outcome in result.hosts:
        try:
            records.write_host_record(env.writers[ref.key], plan.plan_id,
                                      {**record, "host": _ref(ref), "status": outcome.status})
        except CargoshipError as exc:
            missing.append(_ref(ref))
            result.warnings.append(f"could not write the apply record on {ref}: {exc}")
    if missing and result.record is not None:
        record["warnings"] = result.warnings
        record["records_missing_on"] = missing
        try:
            records.write_local_record(plan_file, record)
        except CargoshipError as exc:
            result.warnings.append(f"could not update the local apply record: {exc}")
