"""The one way to make a plan: a context for the config, the engine-config-sync phases run
as a dry run, and what it found turned into a Plan. The CLI (plan, engine-config-sync),
history's "do the hosts still match" and apply's drift check all come here. (And
`connected`: phase 1 alone, for history, which reads the hosts' records without planning.)

Start-up: a plan begins its hosts' handshakes before the phases' code is even imported, so
that code loads while the network works (planner/startup.py). Hence only the context and
the connecting layer are imported up here; the dry run, the phases and the plan model are
imported inside make_plan, after the first dial."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .config.model import ClusterConfig, HostConfig
from .connecting import begin
from .context import Finding, HostState, PlanContext
from .hosts.options import ConnectOptions
from .startup import imports_done

if TYPE_CHECKING:
    from .dryrun import DryRunReport
    from .hosts.reader import HostReader
    from .phases.base import DryRun
    from .plan.hostref import HostRef
    from .plan.model import HostIdentity, Notice, Outcome, Plan

# Given what the run is doing now (a callable), something to hold while it runs: the CLI's
# heartbeat for logs.
Watch = Callable[[Callable[[], str]], AbstractContextManager[object]]


@dataclass(frozen=True)
class MadePlan:
    plan: Plan
    report: DryRunReport  # the run behind it: per-phase records, timings, the context

    @property
    def ctx(self) -> PlanContext:
        return self.report.ctx


def make_plan(config: ClusterConfig, options: ConnectOptions, *,
              salt: bytes | None = None,
              held_sessions: Callable[[HostConfig], HostReader] | None = None,
              applying: str | None = None,
              watch: Watch | None = None) -> MadePlan:
    """Plan engine-config-sync for `config`, read-only.

    salt: the one to salt digests with (apply's drift check reuses its plan's, so the two
    compare); held_sessions: read through sessions the caller holds, and leaves open (an
    apply's); applying: the plan an apply is checking drift for; watch: held around the
    run, given what it is doing now."""
    ctx = PlanContext.create(config, options, held_sessions=held_sessions)
    if salt is not None:
        ctx.salt = salt
    ctx.applying = applying
    with (watch or _unwatched)(lambda: ctx.activity):
        report = _run(ctx)
    return MadePlan(_plan_of(report), report)


@contextmanager
def connected(config: ClusterConfig, options: ConnectOptions) -> Iterator[PlanContext]:
    """A run's context with phase 1 (Connect to hosts) alone run, every session closed on
    the way out: for a command that reads the hosts without planning (history)."""
    from .phases.connect import Connect
    from .phases.disconnect import close_all

    ctx = PlanContext.create(config, options)
    try:
        Connect().run(ctx)
        yield ctx
    finally:
        close_all(ctx)


def _unwatched(activity: Callable[[], str]) -> AbstractContextManager[object]:
    return nullcontext()


def _run(ctx: PlanContext) -> DryRunReport:
    begin(ctx)  # the handshakes run while the phases' code loads (not on held sessions)
    try:
        from .dryrun import dry_run
        from .phases import engine_config_sync

        phases = engine_config_sync()  # a broken plugin fails here
        if ctx.startup is not None:
            ctx.loaded = imports_done(ctx.startup)
    except BaseException:
        if ctx.handshakes is not None:
            ctx.handshakes.close()
        raise
    return dry_run(ctx, phases)


def _plan_of(report: DryRunReport) -> Plan:
    """What the run found, in the plan's terms (hosts by reference, not by index)."""
    from .facts.lock_holder import whoami
    from .plan.build import build_plan
    from .plan.model import Change, Note, PhaseOutcome, Unassessed

    ctx = report.ctx
    names = {h.config.index: h.ref for h in ctx.hosts}
    return build_plan(
        ctx.config, ctx.salt, created_by=whoami(),
        hosts=[_identity(ctx, h) for h in ctx.hosts],
        phases=[PhaseOutcome(r.number, r.title, r.dry_run.value, _outcome(r.dry_run, r.outcome),
                             tuple(Note(_host(names, f), f.text) for f in ctx.findings
                                   if f.phase == r.title))
                for r in report.phases],
        changes=[Change(names[c.host] if c.host is not None else None, c.phase,
                        c.action, c.target, c.before, c.after, c.diff, c.drain, c.restart,
                        c.node, c.label, c.context, c.key_changes)
                 for c in ctx.changes],
        unassessed=[Unassessed(u.phase, _host(names, u), u.text, u.action)
                    for u in ctx.unassessed_items],
        warnings=[_notice(names, w) for w in ctx.warnings],
        problems=[_notice(names, p) for p in ctx.problems],
        seconds=report.seconds)


def _host(names: dict[int, HostRef], finding: Finding) -> HostRef | None:
    return None if finding.host is None else names[finding.host]


def _notice(names: dict[int, HostRef], finding: Finding) -> Notice:
    from .plan.model import Notice

    return Notice(_host(names, finding), finding.phase, finding.text)


def _outcome(dry_run: DryRun, outcome: str) -> Outcome:
    from .phases.base import DryRun

    if outcome == "skipped":
        return "skipped"
    if dry_run is not DryRun.REPORTED:
        return "ran"
    known: dict[str, Outcome] = {"planned": "planned", "no changes": "no changes",
                                 "unassessed": "unassessed"}
    return known.get(outcome, "reported")


def _identity(ctx: PlanContext, host: HostState) -> HostIdentity:
    from .plan.model import HostIdentity

    cfg, ref = host.config, host.ref
    return HostIdentity(
        name=ref.name,
        address=ref.address,
        port=ref.port,
        role=cfg.role,
        profile=cfg.profile,
        host_key=host.host_key,
        os=host.os.pretty_name if host.os else None,
        arch=host.kernel.machine if host.kernel else None,
        engine_version=str(host.engine.version) if host.engine and host.engine.version
        else None,
        reads=dict(sorted(ctx.reads.get(cfg.index, {}).items())),
    )
