"""Render a dry-run report as text for a person: per phase its label and outcome, per host
what was found, then every problem together."""

from __future__ import annotations

from .dryrun import DryRunReport

NOT_ASSESSED = "not yet assessed"


def render_text(report: DryRunReport) -> str:
    ctx = report.ctx
    cfg = ctx.config
    lines = [f"cargoship plan: cluster {cfg.name}, {cfg.engine.distro} {cfg.engine.version}, "
             f"{len(cfg.hosts)} host(s)", ""]
    for record in report.phases:
        outcome = record.outcome
        if record.outcome == "reported":
            outcome = f"reported: {record.assessment or NOT_ASSESSED}"
        lines.append(f"{record.number:>2}. {record.title}  [{record.dry_run.value}] {outcome}")
        width = max((len(h.label) for h in ctx.hosts), default=0)
        for finding in ctx.findings:
            if finding.phase == record.title:
                who = ctx.label(finding) or "cluster"
                lines.append(f"      {who:<{width}}  {finding.text}")
    if ctx.warnings:
        lines += ["", f"Warnings ({len(ctx.warnings)}):"]
        lines += [f"  ! {_where(ctx.label(w))}{w.phase}: {w.text}" for w in ctx.warnings]
    lines.append("")
    if ctx.problems:
        lines.append(f"Problems ({len(ctx.problems)}):")
        lines += [f"  x {_where(ctx.label(p))}{p.phase}: {p.text}" for p in ctx.problems]
        lines += ["", f"Plan failed: {len(ctx.problems)} problem(s); nothing was changed on "
                      f"any host. ({report.seconds:.1f}s)"]
    else:
        lines.append(f"Preflight passed on {len(ctx.hosts)} host(s); nothing was changed on any "
                     f"host. ({report.seconds:.1f}s)")
    return "\n".join(lines) + "\n"


def _where(host: str | None) -> str:
    return f"{host}: " if host else ""
