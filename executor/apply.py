"""`cargoship apply`: apply exactly a saved plan, or refuse and say why.

Order: refuse bad plans before connecting (including an action no handler knows);
connect holding each host to its planned host key; lock every host; refuse a plan already
applied, or one the hosts drifted from (by planning again with the same salt and
comparing); run the hosts stage (the rollout) and, if every host applied, the cluster
stage; record the outcome of every host and every change on each host and next to the
plan (apply_result.py); release the locks. What runs is decided by each change's action
(actions/), never by the phase that planned it.

An interrupted apply (Ctrl-C) records itself as such; applying the same plan again
finishes the hosts it did not reach, after the drift check, or says why it can't.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner import __version__
from planner.context import PlanContext
from planner.errors import CargoshipError
from planner.hosts.ssh import ConnectOptions
from planner.make import make_plan
from planner.plan.codec import plan_digest
from planner.plan.desired import from_desired
from planner.plan.model import Change, Plan, Signature

from . import policy, records
from .actions.base import ApplyEnv, ApplyRefused, ClusterHandler, Item, ItemResult
from .actions.hosts_stage import host_jobs, run_hosts_stage
from .actions.registry import HANDLERS, check_handled
from .apply_result import ApplyResult, write_journal, write_records
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
            raise ApplyRefused("cannot reach every host of the plan: " + "; ".join(failures)
                               + "; nothing was changed on any host")
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
    ctx, keyed, earlier = _held_to_the_plan(plan, config, options, salt, writers, progress)
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
    write_journal(plan, plan_file, env, jobs, result)
    # A signal from here on finishes what is in progress and records an interrupted apply
    # (signals.py); whatever else goes wrong, every host gets its record.
    interrupts.changing.set()
    try:
        _roll_out(plan, env, earlier, staged, jobs, result)
    except Exception as exc:  # noqa: BLE001 - a bug after a host changed: still recorded
        _record_unexpected(plan, env, result, exc)
    result.notes = [i.detail for i in result.after_rollout if i.status == "done" and i.detail]
    result.seconds = round(time.monotonic() - started, 3)
    write_records(plan, plan_file, env, result)
    _remove_temps(env)
    return result


MAX_PROBLEMS = 10  # a refusal's list: the rest are a plan away


def _held_to_the_plan(plan: Plan, config: Any, options: ConnectOptions, salt: bytes,
                      writers: list[HostWriter], progress: Callable[[str, str], None],
                      ) -> tuple[PlanContext, dict[HostKey, HostWriter], Earlier]:
    """The hosts read again and held to the plan (ApplyRefused if they drifted or no
    longer pass the preflight): the fresh plan's context, each host's writer, and what an
    interrupted apply of this plan already did. Nothing is changed yet."""
    # The drift check reads through the sessions held for the rollout: one connection
    # per host for the whole apply.
    held = {h.index: w for h, w in zip(config.hosts, writers, strict=True)}
    made = make_plan(config, options, salt=salt, applying=plan.plan_id,
                     held_sessions=lambda h: held[h.index].reader())
    ctx, fresh = made.ctx, made.plan
    keyed = {h.ref.key: w for h, w in zip(ctx.hosts, writers, strict=True)}
    earlier = _earlier_runs(plan, keyed)
    if len(fresh.problems) == 1:  # one line says where and what
        raise ApplyRefused(f"the hosts no longer pass the preflight: {fresh.problems[0]}; "
                           "nothing was changed on any host")
    if fresh.problems:
        # Several: as the drift refusal reads, the headline, then one problem a line.
        problems = [str(p) for p in fresh.problems]
        if len(problems) > MAX_PROBLEMS:
            problems = [*problems[:MAX_PROBLEMS - 1],
                        f"and {len(problems) - MAX_PROBLEMS + 1} more: cargoship plan lists "
                        "them all"]
        raise ApplyRefused(f"the hosts no longer pass the preflight ({len(fresh.problems)} "
                           "problem(s)); nothing was changed on any host", problems)
    drift = refusal(plan, fresh, finished=earlier.finished, done=earlier.done)
    if drift:
        raise ApplyRefused(*drift)
    progress("drift", "hosts match the plan")
    return ctx, keyed, earlier


def _roll_out(plan: Plan, env: ApplyEnv, earlier: Earlier, staged: list[Change],
              jobs: dict[str, list[HostJob]], result: ApplyResult) -> None:
    """The hosts' changes, then the cluster's, each host's outcome into `result` (those
    an interrupted run finished, as finished by it)."""
    outcomes, result.items = run_hosts_stage(env, staged, jobs)
    result.interrupted = env.stop.is_set()
    by_label = {o.host: o for o in outcomes}
    for host in env.ctx.hosts:
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


def _record_unexpected(plan: Plan, env: ApplyEnv, result: ApplyResult,
                       exc: Exception) -> None:
    """A bug after a host may have changed: every host and change still gets a record,
    those not reached as failed for an unknown reason."""
    why = str(exc) if isinstance(exc, CargoshipError) else f"{type(exc).__name__}: {exc}"
    result.warnings.append(f"apply stopped by an unexpected error: {why}")
    result.interrupted = env.stop.is_set()
    done = {o.host for _, o in result.hosts}
    result.hosts += [(h.ref, HostOutcome(h.label, "failed", f"unknown: {why}"))
                     for h in env.ctx.hosts if h.label not in done]
    listed = {id(i.item) for i in result.items}
    result.items += [ItemResult(c, "failed", f"unknown: {why}") for c in plan.changes
                     if id(c) not in listed]


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
