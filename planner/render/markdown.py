"""A plan as markdown for a pull-request comment, compacted as the text is.

Each change once, with the hosts it applies to, led by what it changes by key in a
```diff block (GitHub colours `+` and `-` lines, and `!` for a changed key, as tfcmt
shows Terraform's `~`); the unified diff only with `full`/`diff`.
"""

from __future__ import annotations

from ..plan.model import NOT_READ, PhaseOutcome, Plan
from ..safetext import fenced, md, printable
from .apply_block import markdown_block
from .choices import SecretNotes, secret_notes
from .groups import (
    CHART_VALUES,
    ChangeGroup,
    flagged_hosts,
    flags,
    grouped,
    host_counts,
    key_line,
    label,
    no_changes,
    not_assessed,
    notes,
    on_hosts,
    section,
    summary_line,
    unassessed_line,
)
from .text import PREFLIGHT, View

_MD_SIGIL = {"+": "+", "-": "-", "~": "!"}


def render_markdown(plan: Plan, view: View | None = None) -> str:
    view = view or View()
    s = plan.summary
    lines = [f"### cargoship plan for `{plan.cluster}`", "",
             f"{summary_line(plan) if not plan.problems else 'Plan failed.'}  ",
             f"Plan `{plan.plan_id}` by {plan.created_by} at {plan.created_at}, "
             f"cargoship {plan.cargoship_version}.", "",
             "| hosts | changes | hosts changed | restarts | unassessed | warnings | problems |",
             "|---|---|---|---|---|---|---|",
             f"| {s['hosts']} | {s['changes']} | {s['hosts_changed']} | {s['restarts']} | "
             f"{s['unassessed']} | {s['warnings']} | {s['problems']} |", "",
             "| # | phase | dry run | outcome |", "|---|---|---|---|"]
    lines += [f"| {p.number} | {p.title} | {p.dry_run} | {md(_outcome(plan, p))} |"
              for p in plan.phases]
    if plan.applyable:
        # Before the changes: a pull request is read from the top.
        lines += ["", *markdown_block(plan, view.full)]
    groups = grouped(plan.changes)
    secrets = secret_notes(plan)
    headings = [p.title for p in plan.phases] + [CHART_VALUES]
    headings += sorted({section(g.change) for g in groups} - set(headings))
    hidden_diffs = False
    for heading in headings:
        here = [g for g in groups if section(g.change) == heading]
        if here:
            lines += [*([""] if lines[-1] else []), f"#### {md(heading)}", ""]
            for group in here:
                hidden_diffs |= _change(lines, group, view, secrets)
    if plan.unassessed:
        lines += ["", "#### Unassessed", ""]
        for phase in dict.fromkeys(item.phase for item in plan.unassessed):
            for where, reason in not_assessed(plan, phase):
                lines.append(f"- {md(phase)}: {md(unassessed_line(where, reason))}"
                             if reason.startswith(NOT_READ) else
                             f"- {md(phase)} on {md(where)}: {md(reason)}")
    lines += _preflight(plan, view)
    if plan.warnings:
        lines += ["", "#### Warnings", ""] + [f"- {md(str(w))}" for w in plan.warnings]
    if plan.problems:
        lines += ["", "#### Problems", ""] + [f"- {md(str(p))}" for p in plan.problems]
    if hidden_diffs:
        lines += ["", "<sub>Unified diffs: `cargoship show PLAN --markdown --diff`.</sub>"]
    if no_changes(plan):
        lines[2] = f"**{lines[2].strip()}**  "
    return printable("\n".join(lines) + "\n")


def _change(lines: list[str], group: ChangeGroup, view: View, secrets: SecretNotes) -> bool:
    """One change group; True when its diff was left out."""
    change = group.change
    lines += [f"**{change.action}** `{fenced(change.target)}` ({flags(change)}) "
              f"{md(on_hosts(group))}", ""]
    if change.key_changes:
        lines.append("```diff")
        for key in change.key_changes:
            sigil, text = key_line(key, secrets.of(change.target, key))
            lines.append(fenced(f"{_MD_SIGIL[sigil]} {text}"))
        lines += [fenced(note) for note in notes(change)]
        lines += ["```", ""]
        if not (view.diff or view.full):
            return True
        lines += ["<details><summary>unified diff</summary>", ""]
    lines += ["```diff", fenced(change.diff.rstrip("\n")), "```", ""]
    if change.key_changes:
        lines += ["</details>", ""]
    return False


def _outcome(plan: Plan, phase: PhaseOutcome) -> str:
    """A phase's outcome, with its hosts counted where some failed there or before."""
    if phase.dry_run not in PREFLIGHT:
        return phase.outcome
    ok, dropped = host_counts(plan, phase)
    return f"{phase.outcome}: {ok} host(s) ok{dropped}" if dropped else phase.outcome


def _preflight(plan: Plan, view: View) -> list[str]:
    """Per-host preflight detail: of hosts with problems or warnings, or of every host."""
    flagged = flagged_hosts(plan)
    rows = [(p.title, label(n.host), n.text) for p in plan.phases for n in p.findings
            if n.host and (view.full or label(n.host) in flagged)]
    if not rows:
        return []
    title = "Preflight detail" if view.full else "Preflight detail of hosts with problems or " \
                                                 "warnings"
    lines = ["", f"<details><summary>{title}</summary>", "",
             "| phase | host | found |", "|---|---|---|"]
    lines += [f"| {md(phase)} | {md(host or '')} | {md(text)} |" for phase, host, text in rows]
    return [*lines, "", "</details>"]
