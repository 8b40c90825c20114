"""`cargoship apply`: apply exactly a saved plan, or refuse and say why.

Order: refuse bad plans before connecting; connect holding each host to its planned host
key; lock every host; refuse a plan already applied or one the hosts drifted from (by
planning again with the same salt and comparing); roll out; merge the kubeconfig and set
labels; record the outcome on each host and next to the plan; release the locks.
"""

from __future__ import annotations

import datetime
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from planner import __version__
from planner.context import HostState, PlanContext
from planner.desired.files import desired_files
from planner.dryrun import dry_run
from planner.errors import CargoshipError
from planner.facts.distro import LAYOUTS
from planner.hosts.ssh import ConnectOptions
from planner.kube import admin_kubeconfig_path, parse_admin
from planner.phases import engine_config_sync
from planner.phases.lock import whoami
from planner.plan import codec
from planner.plan.build import build_plan
from planner.plan.desired import from_desired
from planner.plan.model import Plan

from . import records
from .cluster_steps import label_node, merge_kubeconfig
from .connect import connect_all, pinned_keys
from .drain import DrainOptions, NodeOps
from .drift import differences
from .errors import ApplyInterrupted
from .lock import LockHeld, LockSet, new_lock_info
from .remote import HostWriter
from .rollout import HostJob, HostOutcome, Rollout

SYNC_PHASES = ("Sync Registry Config Controller", "Sync Registry Config Worker")
KUBECONFIG_PHASE = "Updating kubeconfig file with the current cluster"
LABEL_PHASE = "Labeling nodes with their profile group"


class ApplyRefused(CargoshipError):
    """The plan can't be applied as it is; nothing was changed."""


@dataclass
class ApplyResult:
    plan: Plan
    outcomes: list[HostOutcome] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # for the operator, after the outcomes
    interrupted: bool = False
    record: Path | None = None

    @property
    def ok(self) -> bool:
        return not self.interrupted and all(o.status == "applied" for o in self.outcomes)


def check_plan(plan: Plan) -> None:
    ours, theirs = __version__.split(".")[:2], plan.cargoship_version.split(".")[:2]
    # 0.x releases may change what a plan means: the minor must match; later, the major.
    if ours[0] != theirs[0] or (ours[0] == "0" and ours[1] != theirs[1]):
        raise ApplyRefused(f"plan made by cargoship {plan.cargoship_version}, this is "
                           f"{__version__}: re-plan with this version")
    if not plan.applyable:
        why = "; ".join(plan.problems or plan.warnings) or "it says so"
        raise ApplyRefused(f"plan {plan.plan_id} is not applyable: {why}")


def apply(plan_file: Path, *, lock_timeout: float, progress: Callable[[str, str], None],
          accept_new_host_keys: bool = False,
          on_lock_wait: Callable[[LockHeld, float], None] | None = None) -> ApplyResult:
    plan = codec.read(plan_file)
    check_plan(plan)
    salt = bytes.fromhex(plan.salt)
    config = from_desired(plan.desired, salt, str(plan_file))
    options = ConnectOptions(connect_timeout=config.options.connect_timeout,
                             accept_new_host_keys=accept_new_host_keys)
    changing = threading.Event()  # set once the rollout may change a host
    try:
        return _connect_lock_apply(plan, plan_file, config, options, salt, lock_timeout,
                                   progress, on_lock_wait, changing)
    except KeyboardInterrupt:
        if changing.is_set():
            raise
        # Connect, lock and drift check only read (the lock is ours, and released on the
        # way out by LockSet): say so, so nobody goes looking for damage.
        raise ApplyInterrupted("interrupted before anything was changed: nothing was "
                               "changed on any host, and the locks taken were released") \
            from None


def _connect_lock_apply(plan: Plan, plan_file: Path, config: Any, options: ConnectOptions,
                        salt: bytes, lock_timeout: float,
                        progress: Callable[[str, str], None],
                        on_lock_wait: Callable[[LockHeld, float], None] | None,
                        changing: threading.Event) -> ApplyResult:
    connected = connect_all(config, options, pinned_keys(plan))
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
            return _apply_locked(plan, plan_file, config, options, salt, writers, progress,
                                 lock.lost, changing)
    finally:
        for writer in writers:
            writer.close()


def _apply_locked(plan: Plan, plan_file: Path, config: Any, options: ConnectOptions,
                  salt: bytes, writers: list[HostWriter],
                  progress: Callable[[str, str], None],
                  locks_lost: Callable[[], set[str]], changing: threading.Event) -> ApplyResult:
    done = [w.label for w in writers if records.already_applied(w, plan.plan_id)]
    if done:
        raise ApplyRefused(f"plan {plan.plan_id} was already applied (records on "
                           f"{', '.join(done)}); make a new plan")
    ctx = PlanContext.create(config, options)
    ctx.salt = salt
    fresh = build_plan(dry_run(ctx, engine_config_sync()))
    if fresh.problems:
        raise ApplyRefused("the hosts no longer pass the preflight: " +
                           "; ".join(fresh.problems))
    drift = differences(plan, fresh)
    if drift:
        raise ApplyRefused("the hosts changed since the plan was made; re-plan. "
                           + "; ".join(drift))
    progress("drift", "hosts match the plan")
    result = ApplyResult(plan)
    by_label = {h.label: (h, w) for h, w in zip(ctx.hosts, writers, strict=True)}
    api = _api(ctx, writers, plan)
    rollout = Rollout(NodeOps(api) if api is not None else None, plan.plan_id,
                      _drain_options(config), float(config.options.ready_timeout), progress,
                      locks_lost=locks_lost)
    jobs = {role: [_job(config, h, w, plan) for h, w in by_label.values()
                   if h.config.role == role and _changes(plan, h.label, SYNC_PHASES)]
            for role in ("controller", "worker")}
    previous = signal.signal(signal.SIGINT, _interrupt(rollout.stop, progress))
    changing.set()
    try:
        result.outcomes = rollout.run(jobs["controller"], jobs["worker"],
                                      config.options.worker_concurrency)
    finally:
        signal.signal(signal.SIGINT, previous)
    result.interrupted = rollout.stop.is_set()
    if result.ok:
        result.notes += _cluster_steps(plan, config, ctx, writers, api, progress)
    _record(plan, plan_file, writers, [h.label for h in ctx.hosts], result)
    return result


def _interrupt(stop: threading.Event, progress: Callable[[str, str], None]) -> Any:
    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()
        progress("apply", "interrupted: finishing the host in progress, then stopping")
    return handler


def _changes(plan: Plan, label: str, phases: tuple[str, ...]) -> list[Any]:
    return [c for c in plan.changes if c.host == label and c.phase in phases]


def _job(config: Any, host: HostState, writer: HostWriter, plan: Plan) -> HostJob:
    changes = _changes(plan, host.label, SYNC_PHASES)
    wanted = {f.path: f for f in desired_files(config, host.config.role)}
    layout = LAYOUTS[config.engine.distro]
    return HostJob(
        label=host.label, node=host.hostname or host.config.label, writer=writer,
        init=host.init_system or "unknown", service=layout.service(host.config.role),
        files=[wanted[c.target] for c in changes if c.action in ("create", "update")],
        deletes=[c.target for c in changes if c.action == "delete"],
        restart=any(c.restart for c in changes))


def _drain_options(config: Any) -> DrainOptions:
    o = config.options
    return DrainOptions(timeout=float(o.drain_timeout), grace_period=o.drain_grace_period,
                        delete_emptydir_data=o.drain_delete_emptydir_data, force=o.drain_force)


def _admin(ctx: PlanContext, writers: list[HostWriter]) -> dict[str, Any] | None:
    for host, writer in zip(ctx.hosts, writers, strict=True):
        if host.config.role == "controller":
            path = admin_kubeconfig_path(ctx.config.engine.distro)
            text = writer.run_root(f"cat {path}").stdout.decode()
            return parse_admin(text, host.config.ssh.address)
    return None


def _api(ctx: PlanContext, writers: list[HostWriter], plan: Plan) -> Any:
    needs = any(c.restart or c.phase == LABEL_PHASE for c in plan.changes) or any(
        u.phase in (LABEL_PHASE, KUBECONFIG_PHASE) for u in plan.unassessed)
    admin = _admin(ctx, writers) if needs else None
    return ctx.kube_api(admin) if admin else None


def _cluster_steps(plan: Plan, config: Any, ctx: PlanContext, writers: list[HostWriter],
                   api: Any, progress: Callable[[str, str], None]) -> list[str]:
    notes: list[str] = []
    wants_kubeconfig = any(c.phase == KUBECONFIG_PHASE for c in plan.changes) or any(
        u.phase == KUBECONFIG_PHASE for u in plan.unassessed)
    if wants_kubeconfig:
        admin = _admin(ctx, writers)  # read again: a restart may have rewritten it
        if admin is not None:
            path = merge_kubeconfig(config, admin)
            notes.append(f"merged context into {path}")
            progress("kubeconfig", notes[-1])
    # Planned labels, and the unassessed ones now that their nodes are back.
    targets = {c.host for c in plan.changes if c.phase == LABEL_PHASE} | {
        u.host for u in plan.unassessed if u.phase == LABEL_PHASE}
    for host in ctx.hosts:
        if host.label in targets and host.config.profile and api is not None:
            node = host.hostname or host.config.label
            if label_node(api, node, host.config.profile):
                notes.append(f"labelled node {node} with profile {host.config.profile}")
                progress(host.label, notes[-1])
    return notes


def _record(plan: Plan, plan_file: Path, writers: list[HostWriter], labels: list[str],
            result: ApplyResult) -> None:
    at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    outcomes = {o.host: {"status": o.status, "detail": o.detail} for o in result.outcomes}
    record = {"plan_id": plan.plan_id, "cluster": plan.cluster, "applied_by": whoami(),
              "applied_at": at, "cargoship_version": __version__, "ok": result.ok,
              "interrupted": result.interrupted, "hosts": outcomes, "notes": result.notes,
              "signers": [s.comment or s.key for s in plan.signatures]}
    # The local record first: a host that can't take its record must not cost the others
    # theirs, nor the operator the record of what happened.
    result.record = records.write_local_record(plan_file, record)
    missing = []
    for writer, label in zip(writers, labels, strict=True):
        status = outcomes.get(label, {"status": "unchanged"})["status"]
        try:
            records.write_host_record(writer, plan.plan_id,
                                      {**record, "host": label, "status": status})
        except CargoshipError as exc:
            missing.append(label)
            result.warnings.append(f"could not write the apply record on {label}: {exc}")
    if missing:
        record["warnings"] = result.warnings
        record["records_missing_on"] = missing
        records.write_local_record(plan_file, record)
