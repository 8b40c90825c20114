"""Turn what a dry run learned (PlanContext + phase records) into a Plan."""

from __future__ import annotations

import datetime
import secrets

from .. import __version__
from ..context import Finding, HostState, PlanContext
from ..dryrun import DryRunReport
from ..phases.base import DryRun
from ..phases.lock import whoami
from .desired import inline_secrets, to_desired
from .model import (
    Change,
    HostIdentity,
    HostRef,
    Note,
    Notice,
    Outcome,
    PhaseOutcome,
    Plan,
    Unassessed,
)


def build_plan(report: DryRunReport) -> Plan:
    ctx = report.ctx
    names = {h.config.index: h.ref for h in ctx.hosts}
    inline = inline_secrets(ctx.config)
    return Plan(
        plan_id=_uuid4_hex(),
        created_at=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
        + "Z",
        created_by=whoami(),
        cargoship_version=__version__,
        config_digest=ctx.config.digest,
        cluster=ctx.config.name,
        desired=to_desired(ctx.config, ctx.salt),
        hosts=tuple(_identity(ctx, h) for h in ctx.hosts),
        phases=tuple(
            PhaseOutcome(r.number, r.title, r.dry_run.value, _outcome(r.dry_run, r.outcome),
                         tuple(Note(_host(names, f), f.text) for f in ctx.findings
                               if f.phase == r.title))
            for r in report.phases),
        changes=tuple(Change(names[c.host] if c.host is not None else None, c.phase,
                             c.action, c.target, c.before, c.after, c.diff, c.drain, c.restart,
                             c.node, c.label, c.context, c.key_changes)
                      for c in ctx.changes),
        unassessed=tuple(Unassessed(u.phase, _host(names, u), u.text, u.action)
                         for u in ctx.unassessed_items),
        warnings=tuple(_notice(names, w) for w in ctx.warnings) + tuple(
            Notice(None, None, f"{path}: an inline secret can't be carried by a plan; use "
                   "fromEnv or fromFile to make this plan applyable") for path in inline),
        problems=tuple(_notice(names, p) for p in ctx.problems),
        salt=ctx.salt.hex(),
        seconds=round(report.seconds, 3),
        applyable=not ctx.problems and not inline,
        complete=not ctx.problems and not ctx.unassessed_items,
    )


def _host(names: dict[int, HostRef], finding: Finding) -> HostRef | None:
    return None if finding.host is None else names[finding.host]


def _notice(names: dict[int, HostRef], finding: Finding) -> Notice:
    return Notice(_host(names, finding), finding.phase, finding.text)


def _outcome(dry_run: DryRun, outcome: str) -> Outcome:
    if outcome == "skipped":
        return "skipped"
    if dry_run is not DryRun.REPORTED:
        return "ran"
    known: dict[str, Outcome] = {"planned": "planned", "no changes": "no changes",
                                 "unassessed": "unassessed"}
    return known.get(outcome, "reported")


def _identity(ctx: PlanContext, host: HostState) -> HostIdentity:
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


def _uuid4_hex() -> str:
    """A random (version 4) UUID as 32 hex digits, what uuid.uuid4().hex gives, without
    importing uuid: it imports platform, which a plan then pays for on every run."""
    raw = bytearray(secrets.token_bytes(16))
    raw[6] = raw[6] & 0x0F | 0x40  # version 4
    raw[8] = raw[8] & 0x3F | 0x80  # RFC 4122 variant
    return raw.hex()
