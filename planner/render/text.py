"""A plan as text for a terminal: compact by default, the way Terraform prints a plan.

Per phase its dry-run label and outcome; per-host preflight detail only for hosts with a
problem or a warning; each change once, with the hosts it applies to, led by what it
changes by key; the summary. `full` shows every host's detail and the unified diffs.

Colour is decided here, where it is known what each line is: a diff line by its diff
column, never by what its content looks like (a YAML list item `- foo` is not a removal).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..plan.model import Change, HostRef, PhaseOutcome, Plan
from ..safetext import printable
from .apply_block import text_block
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

Style = Literal["add", "remove", "change", "hunk", "header", "problem", "warning"] | None
Line = tuple[Style, str]

_ANSI: dict[str, str] = {"add": "\x1b[32m", "remove": "\x1b[31m", "change": "\x1b[33m",
                         "hunk": "\x1b[36m", "header": "\x1b[1m", "problem": "\x1b[31m",
                         "warning": "\x1b[33m"}
_RESET = "\x1b[0m"
_SIGIL_STYLE: dict[str, Style] = {"+": "add", "-": "remove", "~": "change"}
HINT = ("(Compact plan: every host's preflight detail and the unified diffs with "
        "`plan --verbose` or `show --full`, the diffs alone with `--diff`.)")
PREFLIGHT = ("runs, reads only", "runs its own dry-run path")


@dataclass(frozen=True)
class View:
    full: bool = False  # every host's preflight detail, and the diffs
    diff: bool = False  # the unified diffs under each change's key summary
    color: bool = False


def render_text(plan: Plan, view: View | None = None) -> str:
    view = view or View()
    lines: list[Line] = []
    if no_changes(plan):
        lines += [(None, summary_line(plan)), (None, "")]
    lines.append((None, f"cargoship plan {plan.plan_id}: cluster {plan.cluster}, "
                        f"{plan.desired['engine']['distro']} "
                        f"{plan.desired['engine']['version']}, {len(plan.hosts)} host(s)"))
    lines.append((None, ""))
    groups = grouped(plan.changes)
    secrets = secret_notes(plan)
    flagged = flagged_hosts(plan)
    compacted = False
    for phase in plan.phases:
        compacted |= _phase(lines, plan, phase, view, flagged, groups, secrets)
    # Chart values; and changes of a phase the plan does not list (a hand-made plan):
    # shown, never dropped.
    titles = {p.title for p in plan.phases}
    for heading in dict.fromkeys(section(g.change) for g in groups):
        if heading in titles:
            continue
        lines += [(None, ""), (None, f"{heading}:")]
        for group in groups:
            if section(group.change) == heading:
                compacted |= _change(lines, group, view, secrets)
    lines.append((None, ""))
    if compacted:
        lines += [(None, HINT), (None, "")]
    _ending(lines, plan, view)
    return "".join(_styled(style, text, view.color) for style, text in lines)


def _phase(lines: list[Line], plan: Plan, phase: PhaseOutcome, view: View, flagged: set[str],
           groups: list[ChangeGroup], secrets: SecretNotes) -> bool:
    """One phase's block: its findings (hosts that passed a preflight counted, not listed,
    unless the view is full), its changes and what it did not assess. Whether any of it
    was compacted."""
    lines.append((None, f"{phase.number:>2}. {phase.title}  [{phase.dry_run}] "
                        f"{phase.outcome}"))
    width = max((len(label(n.host) or "cluster") for n in phase.findings), default=7)
    hidden: set[HostRef] = set()
    compacted = False
    for note in phase.findings:
        if note.host and phase.dry_run in PREFLIGHT and not view.full \
                and label(note.host) not in flagged:
            hidden.add(note.host)
            continue
        lines.append((None, f"      {label(note.host) or 'cluster':<{width}}  {note.text}"))
    ok, dropped = host_counts(plan, phase) if phase.dry_run in PREFLIGHT else (0, "")
    if hidden:
        compacted = True
        others = "other " if len(hidden) < len({n.host for n in phase.findings}) else ""
        lines.append((None, f"      {len(hidden)} {others}host(s) ok{dropped}"))
    elif dropped:
        lines.append((None, f"      {ok} host(s) ok{dropped}"))
    for group in groups:
        if group.change.phase == phase.title and section(group.change) == phase.title:
            compacted |= _change(lines, group, view, secrets)
    if any(c.phase == phase.title and section(c) == CHART_VALUES for c in plan.changes):
        lines.append((None, f"      chart values: under \"{CHART_VALUES}\" below"))
    lines += [(None, f"      {unassessed_line(where, reason)}")
              for where, reason in not_assessed(plan, phase.title)]
    return compacted


def _ending(lines: list[Line], plan: Plan, view: View) -> None:
    """What apply would obey, the summary, warnings, problems and the verdict."""
    if plan.applyable:
        # Right above the summary: the last thing on a terminal, and not skipped by a
        # reader who scrolls to the end.
        lines += [("warning" if flag else None, text) for flag, text in
                  text_block(plan, view.full)]
        lines.append((None, ""))
    if not plan.problems and not no_changes(plan):
        lines.append((None, summary_line(plan)))
    if plan.warnings:
        if lines[-1][1]:
            lines.append((None, ""))
        lines.append((None, f"Warnings ({len(plan.warnings)}):"))
        lines += [("warning", f"  ! {w}") for w in plan.warnings]
    if plan.problems:
        lines += [(None, ""), (None, f"Problems ({len(plan.problems)}):")]
        lines += [("problem", f"  x {p}") for p in plan.problems]
        lines += [(None, ""), (None, f"Plan failed: {len(plan.problems)} problem(s); nothing "
                                     f"was changed on any host. ({plan.seconds:.1f}s)")]
    else:
        lines.append((None, f"Preflight passed on {len(plan.hosts)} host(s); nothing was "
                            f"changed on any host. ({plan.seconds:.1f}s)"))


def _change(lines: list[Line], group: ChangeGroup, view: View, secrets: SecretNotes) -> bool:
    """One change group; True when something was left out (the diff)."""
    change = group.change
    lines.append((None, f"      {change.action} {change.target} ({flags(change)}) "
                        f"{on_hosts(group)}"))
    for key in change.key_changes:
        sigil, text = key_line(key, secrets.of(change.target, key))
        lines.append((_SIGIL_STYLE[sigil], f"          {sigil} {text}"))
    shown_notes = notes(change) if change.key_changes else []
    lines += [(None, f"          {note}") for note in shown_notes]
    if change.key_changes and not (view.diff or view.full):
        return True
    lines += [(style, f"          {text}") for style, text in diff_lines(change)
              if not (change.key_changes and text in shown_notes)]
    return False


def diff_lines(change: Change) -> list[Line]:
    """A change's diff, each line styled by its diff column: `+` added, `-` removed, `@@`
    a hunk; `---`/`+++` only as the file header before the first hunk."""
    out: list[Line] = []
    header = True
    for text in change.diff.rstrip("\n").splitlines():
        style: Style = None
        if text.startswith("@@"):
            header, style = False, "hunk"
        elif header and text.startswith(("--- ", "+++ ")):
            style = "header"
        elif text.startswith("+"):
            style = "add"
        elif text.startswith("-"):
            style = "remove"
        out.append((style, text))
    return out


def _styled(style: Style, text: str, color: bool) -> str:
    # Host and file text is made printable before any escape of ours is added.
    safe = printable(text)
    if color and style is not None and safe.strip():
        return f"{_ANSI[style]}{safe}{_RESET}\n"
    return safe + "\n"
