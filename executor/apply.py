"""`cargoship apply`: apply exactly a saved plan, or refuse and say why.

Order: refuse bad plans before connecting (including an action no handler knows);
connect holding each host to its planned host key; lock every host; refuse a plan already
applied, or one the hosts drifted from (by planning again with the same salt and
comparing); run the hosts stage (the rollout) and, if every host applied, the cluster
stage; record the outcome of every host and every change on each host and next to the
plan; release the locks. What runs is decided by each change's action (actions/), never by
the phase that planned it.

An interrupted apply (Ctrl-C) records itself as such; applying the same plan again
finishes the hosts it did not reach, after the drift check, or says why it can't.
"""

from __future__ import annotations

import datetime
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner import __version__
from planner.errors import CargoshipError
from planner.facts.lock_holder import whoami
from planner.hosts.batch import quote
from planner.hosts.ssh import ConnectOptions
from planner.make import make_plan
from planner.plan.codec import plan_digest
from planner.plan.desired import from_desired
from planner.plan.model import Change, HostRef, Plan, Signature

from . import policy, records
from .actions.base import ApplyEnv, ApplyRefused, ClusterHandler, Item, ItemResult
from .actions.hosts_stage import host_jobs, run_hosts_stage
from .actions.registry import HANDLERS, check_handled
from .cleanup import remove_temps
from .connect import SessionFactory, connect_all, pinned_keys, ssh_session
from .drift import HostKey, change_key, refusal
from .errors import ApplyInterrupted
from .host_job import HostJob, HostOutcome
from .host_lock import LockHeld, LockSet, new_lock_info
from .remote import HostWriter
from .replay import Earlier, judge
from .signals import Interrupts
from .waits import DEFAULT, Waits

__all__ = ["ApplyRefused", "ApplyResult", "apply", "check_plan"]
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


@dataclass(frozen=True)
class _Seams:
    """What a caller may swap in: how sessions open, and the waits."""

    sessions: SessionFactory
    waits: Waits


def check_plan(plan: Plan) -> None:
    ours, theirs = __version__.split(".")[:2], plan.cargoship_version.split(".")[:2]
    # 0.x releases may change what a plan means: the minor must match; later, the major.
    if ours[0] != theirs[0] or (ours[0] == "0" and ours[1] != theirs[1]):
        raise ApplyRefused(f"plan made by cargoship {plan.cargoship_version}, this is "
                           f"{__version__}: re-plan with this version")
    if not plan.applyable:
        why = "; ".join(map(str, plan.problems or plan.warnings)) or "it says so"
        raise ApplyRefused(f"plan {plan.plan_id} is not applyable: {why}")
    check_handled(plan)


def apply(plan: Plan, plan_file: Path, *, lock_timeout: float,
          progress: Callable[[str, str], None], accept_new_host_keys: bool = False,
          on_lock_wait: Callable[[LockHeld, float], None] | None = None,
          signers: Sequence[str] = (), signatures: Sequence[Signature] = (),
          sessions: SessionFactory = ssh_session, waits: Waits = DEFAULT) -> ApplyResult:
    """Apply `plan`, the one the caller read (once) and checked; `plan_file` only says where
    the local record goes. Nothing here reads the plan file again. `signers`: the
    principals whose signatures the caller verified against an allowed-signers file.
    `sessions` opens each host's SSH session (connect.py; unit tests pass a fake);
    `waits`: how long to wait for things (waits.py)."""
    started = time.monotonic()
    check_plan(plan)
    salt = bytes.fromhex(plan.salt)
    config = from_desired(plan.desired, salt, str(plan_file))
    options = ConnectOptions(connect_timeout=config.options.connect_timeout,
                             accept_new_host_keys=accept_new_host_keys)
    changing = threading.Event()  # set once the rollout may change a host
    interrupts = Interrupts(progress, threading.Event(), changing)
    try:
        with interrupts:
            result = _connect_lock_apply(plan, plan_file, config, options, salt,
                                         lock_timeout, progress, on_lock_wait, started,
                                         interrupts, tuple(signers), tuple(signatures),
                                         _Seams(sessions, waits))
    except KeyboardInterrupt as exc:
        if changing.is_set():
            raise
        # Connect, lock and drift check only read (the lock is ours, and released on the
        # way out by LockSet): say so, so nobody goes looking for damage.
        raise ApplyInterrupted("interrupted before anything was changed: nothing was "
                               "changed on any host, and the locks taken were released",
                               getattr(exc, "signum", signal.SIGINT)) from None
    result.signum = interrupts.first if result.interrupted else None
    return result


def _connect_lock_apply(plan: Plan, plan_file: Path, config: Any, options: ConnectOptions,
                        salt: bytes, lock_timeout: float,
                        progress: Callable[[str, str], None],
                        on_lock_wait: Callable[[LockHeld, float], None] | None,
                        started: float, interrupts: Interrupts,
                        signers: tuple[str, ...],
                        signatures: tuple[Signature, ...], seams: _Seams) -> ApplyResult:
    connected = connect_all(config, options, pinned_keys(plan), sessions=seams.sessions,
                            waits=seams.waits)
    failures = [str(c) for c in connected if isinstance(c, Exception)]
    writers = [c for c in connected if isinstance(c, HostWriter)]
    try:
        if failures:
            raise ApplyRefused("cannot reach every host of the plan: " + "; ".join(failures))
        lock = LockSet(writers, new_lock_info(plan.plan_id), wait_timeout=lock_timeout,
                       config_file=str(plan_file), on_wait=on_lock_wait)
        with lock:  # acquires every host's lock; releases them on any exit
            for note in lock.notes:
                progress("lock", note)
            progress("lock", f"locked {len(writers)} host(s)")
            signers = tuple(sorted({*signers, *_policy(plan, config, writers, signatures,
                                                       progress)}))
            return _apply_locked(plan, plan_file, config, options, salt, writers, progress,
                                 lock.lost, started, interrupts, signers, signatures,
                                 seams.waits)
    finally:
        for writer in writers:
            writer.close()
        options.close()


def _policy(plan: Plan, config: Any, writers: list[HostWriter],
            detached: Sequence[Signature], progress: Callable[[str, str], None]) -> list[str]:
    """The controllers' signature policy, enforced whatever the flags (policy.py): the
    principals it verified, or ApplyRefused."""
    found = {w.label: policy.read(w)
             for h, w in zip(config.hosts, writers, strict=True) if h.role == "controller"}
    try:
        rules = policy.agreed(found)
        if rules is None:
            return []
        principals = policy.enforce(rules, plan_digest(plan), (*plan.signatures, *detached))
    except policy.PolicyError as exc:
        raise ApplyRefused(str(exc)) from None
    progress("policy", f"the cluster's signature policy is met: signed by "
                       f"{', '.join(principals)}")
    return principals


def _apply_locked(plan: Plan, plan_file: Path, config: Any, options: ConnectOptions,
                  salt: bytes, writers: list[HostWriter],
                  progress: Callable[[str, str], None],
                  locks_lost: Callable[[], set[str]], started: float,
                  interrupts: Interrupts, signers: tuple[str, ...],
                  signatures: tuple[Signature, ...], waits: Waits) -> ApplyResult:
    # The drift check reads through the sessions held for the rollout: one connection
    # per host for the whole apply.
    held = {h.index: w for h, w in zip(config.hosts, writers, strict=True)}
    made = make_plan(config, options, salt=salt, applying=plan.plan_id,
                     held_sessions=lambda h: held[h.index].reader())
    ctx, fresh = made.ctx, made.plan
    keyed = {h.ref.key: w for h, w in zip(ctx.hosts, writers, strict=True)}
    earlier = _earlier_runs(plan, keyed)
    if fresh.problems:
        raise ApplyRefused("the hosts no longer pass the preflight: " +
                           "; ".join(map(str, fresh.problems)))
    drift = refusal(plan, fresh, finished=earlier.finished, done=earlier.done)
    if drift:
        raise ApplyRefused(*drift)
    progress("drift", "hosts match the plan")
    env = ApplyEnv(plan, config, ctx, keyed, progress, locks_lost, stop=interrupts.stop,
                   escalations=interrupts.escalations, waits=waits)
    result = ApplyResult(plan, resumed=earlier.record is not None, signers=signers,
                         signatures=signatures)
    staged = [c for c in plan.changes if HANDLERS[c.action].stage == "hosts"
              and change_key(c) not in earlier.done]
    jobs = host_jobs(env, staged)  # may refuse an edited plan: still nothing changed
    if earlier.record is not None:
        progress("apply", f"finishing plan {plan.plan_id}: {len(earlier.finished)} host(s) "
                          "were finished by the interrupted run")
    _journal(plan, plan_file, env, jobs, result)
    # A signal from here on finishes what is in progress and records an interrupted apply
    # (signals.py); whatever else goes wrong, every host gets its record.
    interrupts.changing.set()
    try:
        outcomes, result.items = run_hosts_stage(env, staged, jobs)
        result.interrupted = env.stop.is_set()
        by_label = {o.host: o for o in outcomes}
        for host in ctx.hosts:
            if host.ref.key in earlier.finished:
                outcome = HostOutcome(host.label, "applied", "finished by the interrupted run")
            else:
                outcome = by_label.get(host.label, HostOutcome(host.label, "unchanged"))
            result.hosts.append((host.ref, outcome))
        result.items += [ItemResult(c, "done", "by the interrupted run") for c in plan.changes
                         if change_key(c) in earlier.done]
        result.after_rollout = _cluster_stage(plan, env, run=result.ok)
        result.items += result.after_rollout
        result.interrupted = env.stop.is_set()
    except Exception as exc:  # noqa: BLE001 - a bug after a host changed: still recorded
        why = str(exc) if isinstance(exc, CargoshipError) else f"{type(exc).__name__}: {exc}"
        result.warnings.append(f"apply stopped by an unexpected error: {why}")
        result.interrupted = env.stop.is_set()
        done = {o.host for _, o in result.hosts}
        result.hosts += [(h.ref, HostOutcome(h.label, "failed", f"unknown: {why}"))
                         for h in ctx.hosts if h.label not in done]
        listed = {id(i.item) for i in result.items}
        result.items += [ItemResult(c, "failed", f"unknown: {why}") for c in plan.changes
                         if id(c) not in listed]
    result.notes = [i.detail for i in result.after_rollout if i.status == "done" and i.detail]
    result.seconds = round(time.monotonic() - started, 3)
    _record(plan, plan_file, env, result)
    _remove_temps(env)
    return result


def _earlier_runs(plan: Plan, writers: dict[HostKey, HostWriter]) -> Earlier:
    """The records of this plan on its hosts, judged by replay.py."""
    return judge(plan.plan_id, {key: r for key, w in writers.items()
                                if (r := records.read_host_record(w, plan.plan_id))
                                is not None})


def _cluster_stage(plan: Plan, env: ApplyEnv, *, run: bool) -> list[ItemResult]:
    """The cluster handlers in registry order, with their planned and unassessed items:
    only after a rollout that left every host applied."""
    results: list[ItemResult] = []
    for action, handler in HANDLERS.items():
        if not isinstance(handler, ClusterHandler):
            continue
        items: list[Item] = [c for c in plan.changes if c.action == action]
        items += [u for u in plan.unassessed if u.action == action]
        if not items:
            continue
        if not run or env.stop.is_set():
            why = "interrupted" if env.stop.is_set() else "the rollout did not finish"
            results += [ItemResult(i, "not done", why) for i in items]
            continue
        try:
            results += handler.run(items, env)
        except Exception as exc:  # noqa: BLE001 - whatever a step raises, the hosts changed
            # already and must get their records: the step is failed, the apply goes on
            # to record it (an unexpected error type is still one line, never a traceback).
            why = str(exc) if isinstance(exc, CargoshipError) else \
                f"{type(exc).__name__}: {exc}"
            results += [ItemResult(i, "failed", why) for i in items]
            env.progress("apply", f"{action} failed: {why}")
    return results


def _remove_temps(env: ApplyEnv) -> None:
    """The disconnect step of a real run: temps a killed run left (see cleanup.py)."""
    for host in env.ctx.hosts:
        try:
            removed = remove_temps(env.writers[host.ref.key], env.config.engine.distro,
                                   host.engine_settings)
        except CargoshipError as exc:
            env.progress(host.label, f"could not remove leftover temp files: {exc}")
            continue
        if removed:
            env.progress(host.label, f"removed {removed} temp file(s) a killed run left")


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


def _journal(plan: Plan, plan_file: Path, env: ApplyEnv, jobs: dict[str, list[HostJob]],
             result: ApplyResult) -> None:
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

    with ThreadPoolExecutor(max_workers=max(1, min(32, len(hosts))),
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


def _record(plan: Plan, plan_file: Path, env: ApplyEnv, result: ApplyResult) -> None:
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
