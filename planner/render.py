"""Render a dry-run report as text for a person: per phase its label and outcome, per host
what was found and would change (diffs with secrets masked), then unassessed items,
warnings and problems, each in one place."""

from __future__ import annotations

from .context import PlanContext, PlannedChange
from .dryrun import DryRunReport


def render_text(report: DryRunReport) -> str:
    ctx = report.ctx
    cfg = ctx.config
    width = max((len(h.label) for h in ctx.hosts), default=0)
    lines = [f"cargoship plan: cluster {cfg.name}, {cfg.engine.distro} {cfg.engine.version}, "
             f"{len(cfg.hosts)} host(s)", ""]
    for record in report.phases:
        lines.append(f"{record.number:>2}. {record.title}  [{record.dry_run.value}] "
                     f"{record.outcome}")
        for finding in ctx.findings:
            if finding.phase == record.title:
                lines.append(f"      {ctx.label(finding) or 'cluster':<{width}}  {finding.text}")
        for change in ctx.changes:
            if change.phase == record.title:
                lines += _change(ctx, change)
        for item in ctx.unassessed_items:
            if item.phase == record.title:
                lines.append(f"      {ctx.label(item) or 'cluster':<{width}}  unassessed: "
                             f"{item.text}")
    lines.append("")
    if ctx.changes or ctx.unassessed_items:
        hosts = len({c.host for c in ctx.changes})
        restarts = len({c.host for c in ctx.changes if c.restart})
        lines.append(f"Plan: {len(ctx.changes)} change(s) on {hosts} host(s), {restarts} "
                     f"restart(s), {len(ctx.unassessed_items)} unassessed.")
    elif not ctx.problems:
        lines.append("No changes: every host matches the desired engine config.")
    if ctx.warnings:
        lines += ["", f"Warnings ({len(ctx.warnings)}):"]
        lines += [f"  ! {_where(ctx.label(w))}{w.phase}: {w.text}" for w in ctx.warnings]
    if ctx.problems:
        lines += ["", f"Problems ({len(ctx.problems)}):"]
        lines += [f"  x {_where(ctx.label(p))}{p.phase}: {p.text}" for p in ctx.problems]
        lines += ["", f"Plan failed: {len(ctx.problems)} problem(s); nothing was changed on "
                      f"any host. ({report.seconds:.1f}s)"]
    else:
        lines.append(f"Preflight passed on {len(ctx.hosts)} host(s); nothing was changed on any "
                     f"host. ({report.seconds:.1f}s)")
    return "\n".join(lines) + "\n"


def _change(ctx: PlanContext, change: PlannedChange) -> list[str]:
    who = ctx.hosts[change.host].label if change.host is not None else "local"
    flags = "drain + restart" if change.restart else "in place"
    lines = [f"      {who}  {change.action} {change.target} ({flags})"]
    lines += [f"          {line}" for line in change.diff.rstrip("\n").splitlines()]
    return lines


def _where(host: str | None) -> str:
    return f"{host}: " if host else ""
