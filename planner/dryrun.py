"""Run phases as a dry run: only what a phase declared safe, everything else reported."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from .context import HostState, PlanContext
from .phases.base import DryRun, Phase, Resource
from .phases.connect import Connect
from .phases.disconnect import close_all
from .plan.model import NOT_READ

log = logging.getLogger("cargoship.planner")


@dataclass(frozen=True)
class PhaseRecord:
    number: int
    title: str
    dry_run: DryRun
    # "ran", "ran its dry-run path"; reported phases: "planned", "no changes",
    # "unassessed" or "reported" (a phase with no assessment); "skipped": no host connected
    outcome: str
    seconds: float


@dataclass(frozen=True)
class DryRunReport:
    ctx: PlanContext
    phases: tuple[PhaseRecord, ...]
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.ctx.problems


def dry_run(ctx: PlanContext, phases: Sequence[Phase]) -> DryRunReport:
    records: list[PhaseRecord] = []
    started = time.monotonic()
    # What earlier reported phases would write, and why: "'Title' would change first", or
    # "may change" for a phase that could not be assessed where it would write it.
    would_write: dict[Resource, str] = {}
    ctx.prefetch = lambda host: [f for phase in phases for f in phase.prefetch(ctx, host)]
    try:
        for number, phase in enumerate(phases, 1):
            phase_started, cpu_started = time.monotonic(), time.process_time()
            ctx.activity = f"phase {number}/{len(phases)}: {phase.title}"
            phase.prepare(ctx)
            connected = any(r.title == Connect.title for r in records)
            if connected and ctx.hosts and not ctx.active_hosts() and \
                    phase.dry_run is not DryRun.RUNS_OWN_DRY_RUN_PATH:
                # Nothing was read: "no changes" would be a claim about hosts never seen.
                outcome = "skipped"
            elif phase.dry_run is DryRun.RUNS_READ_ONLY:
                phase.run(ctx)
                outcome = "ran"
            elif phase.dry_run is DryRun.RUNS_OWN_DRY_RUN_PATH:
                phase.dry_run_path(ctx)
                outcome = "ran its dry-run path"
            else:
                outcome = _assess(ctx, phase, would_write)
            elapsed = time.monotonic() - phase_started
            log.debug("phase %d %s: %s in %.3fs, %.3f s of the process's CPU", number,
                      phase.title, outcome, elapsed, time.process_time() - cpu_started)
            records.append(PhaseRecord(number, phase.title, phase.dry_run, outcome, elapsed))
    finally:
        # Also on Ctrl-C or a bug: no SSH session outlives the run.
        close_all(ctx)
    return DryRunReport(ctx, tuple(records), time.monotonic() - started)


def _with_would(reason: str, would: str | None) -> str:
    return f"{reason}; once it can be read, apply would {would}" if would else reason


def _assess(ctx: PlanContext, phase: Phase, would_write: dict[Resource, str]) -> str:
    """Assess a reported phase where it can be, and say why not where it can't."""
    blocked_cluster = _conflict(phase.cluster_reads(ctx), None, would_write)
    if blocked_cluster:
        # Something that belongs to no host: one item for the cluster, not one per host.
        ctx.unassessed(phase.title, None, _with_would(blocked_cluster, phase.would(ctx, None)),
                       phase.unassessed_action)
        _may_write(would_write, phase, {(None, w) for w in phase.cluster_may_write(ctx)} | {
            (h.config.index, w) for h in ctx.active_hosts() for w in phase.may_write(ctx, h)})
        return "unassessed"
    assessable: list[HostState] = []
    for host in ctx.active_hosts():
        reason = _conflict(phase.reads(ctx, host), host.config.index, would_write)
        if reason:
            ctx.unassessed(phase.title, host, _with_would(reason, phase.would(ctx, host)),
                           phase.unassessed_action)
            _may_write(would_write, phase,
                       {(host.config.index, w) for w in phase.may_write(ctx, host)})
        else:
            assessable.append(host)
    changes_before = len(ctx.changes)
    writes = phase.assess(ctx, assessable) if assessable or not ctx.active_hosts() else set()
    if writes is None:
        return "reported"
    not_read = _not_read(ctx, phase)
    for resource in writes:
        would_write.setdefault(resource, f"{phase.title!r} would change first")
    if len(ctx.changes) > changes_before or writes:
        return "planned"
    if len(assessable) < len(ctx.active_hosts()) or not_read:
        return "unassessed"
    return "no changes"


def _not_read(ctx: PlanContext, phase: Phase) -> int:
    """Hosts this phase would read but that dropped out of the run earlier (unreachable,
    or a failed preflight): each is unassessed, saying why, never "no changes"."""
    count = 0
    for host in ctx.hosts:
        if host.active or not phase.reads(ctx, host):
            continue
        first = next((p.phase for p in ctx.problems if p.host == host.config.index), None)
        why = "unreachable" if first in (None, Connect.title) else f"failed {first!r}"
        ctx.unassessed(phase.title, host, NOT_READ + why, None)
        count += 1
    return count


def _conflict(reads: frozenset[str], host: int | None,
              would_write: dict[Resource, str]) -> str | None:
    for what in sorted(reads):
        writer = would_write.get((host, what)) or would_write.get((None, what))
        if writer:
            return f"reads {_describe(what)}, which {writer}"
    return None


def _may_write(would_write: dict[Resource, str], phase: Phase,
               resources: set[Resource]) -> None:
    for resource in resources:
        would_write.setdefault(resource, f"{phase.title!r} may change first (it could not "
                                         "be assessed either)")


def _describe(what: str) -> str:
    kind, _, name = what.partition(":")
    return {"file": f"{name}", "node": "its node object", "lock": "the lock file",
            "kubeconfig": "the local kubeconfig"}.get(kind, what) if kind != "file" else name
