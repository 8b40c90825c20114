"""Render a plan for people: text for a terminal, markdown for a pull-request comment.

Both show, per phase, its dry-run label and outcome, what was found per host, what would
change (diffs, secrets already masked in the plan) and what could not be assessed; then
warnings and problems, each in one place.
"""

from __future__ import annotations

import re

from .plan.model import Change, HostRef, Plan

# C0/C1 control characters (but tab and newline) and the bidi controls of "Trojan Source":
# text from hosts and plan files can carry terminal escapes; they are shown, never obeyed.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e"
                     "\u2066-\u2069]")


def json_escaped(text: str) -> str:
    """JSON text with every control and bidi character inside its strings written as a
    \\u escape: the same data for a parser, nothing a terminal or an editor would obey.
    (json.dumps escapes C0 itself, but not DEL, C1 or the bidi controls.)"""
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def printable(text: str) -> str:
    """`text` with every control character written out as an escape (`\\x1b`)."""
    return _UNSAFE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                       else f"\\u{ord(m.group()):04x}", text)


def _at(host: HostRef | None, default: str) -> str:
    """A host as people read it (name, address, port unless 22), or what stands for none."""
    return default if host is None else str(host)


def _flags(change: Change) -> str:
    return "drain + restart" if change.restart else "in place"


def summary_line(plan: Plan) -> str:
    s = plan.summary
    if not s["changes"] and not s["unassessed"]:
        return "No changes: every host matches the desired engine config."
    return (f"Plan: {s['changes']} change(s) on {s['hosts_changed']} host(s), "
            f"{s['restarts']} restart(s), {s['unassessed']} unassessed.")


_GREEN, _RED, _CYAN, _BOLD, _RESET = "\x1b[32m", "\x1b[31m", "\x1b[36m", "\x1b[1m", "\x1b[0m"


def colorize(text: str) -> str:
    """Terraform-like colours for a terminal: additions green, removals red, problems red."""
    out = []
    for line in text.splitlines(keepends=True):
        body = line.lstrip(" ")
        if body.startswith(("+++", "---")):
            out.append(f"{_BOLD}{line.rstrip(chr(10))}{_RESET}\n")
        elif body.startswith("+"):
            out.append(f"{_GREEN}{line.rstrip(chr(10))}{_RESET}\n")
        elif body.startswith(("-", "x ")):
            out.append(f"{_RED}{line.rstrip(chr(10))}{_RESET}\n")
        elif body.startswith("@@"):
            out.append(f"{_CYAN}{line.rstrip(chr(10))}{_RESET}\n")
        else:
            out.append(line)
    return "".join(out)


def render_text(plan: Plan) -> str:
    width = max((len(_at(n.host, "cluster")) for p in plan.phases for n in p.findings),
                default=7)
    lines = [f"cargoship plan {plan.plan_id}: cluster {plan.cluster}, "
             f"{plan.desired['engine']['distro']} {plan.desired['engine']['version']}, "
             f"{len(plan.hosts)} host(s)", ""]
    for phase in plan.phases:
        lines.append(f"{phase.number:>2}. {phase.title}  [{phase.dry_run}] {phase.outcome}")
        lines += [f"      {_at(n.host, 'cluster'):<{width}}  {n.text}" for n in phase.findings]
        for change in (c for c in plan.changes if c.phase == phase.title):
            lines.append(f"      {_at(change.host, 'local')}  {change.action} {change.target} "
                         f"({_flags(change)})")
            lines += [f"          {line}" for line in change.diff.rstrip("\n").splitlines()]
        lines += [f"      {_at(u.host, 'cluster'):<{width}}  unassessed: {u.reason}"
                  for u in plan.unassessed if u.phase == phase.title]
    lines += ["", summary_line(plan) if not plan.problems else ""]
    if plan.warnings:
        lines += ["", f"Warnings ({len(plan.warnings)}):"] + [f"  ! {w}" for w in plan.warnings]
    if plan.problems:
        lines += [f"Problems ({len(plan.problems)}):"] + [f"  x {p}" for p in plan.problems]
        lines += ["", f"Plan failed: {len(plan.problems)} problem(s); nothing was changed on "
                      f"any host. ({plan.seconds:.1f}s)"]
    else:
        lines.append(f"Preflight passed on {len(plan.hosts)} host(s); nothing was changed on "
                     f"any host. ({plan.seconds:.1f}s)")
    return printable("\n".join(lines).replace("\n\n\n", "\n\n") + "\n")


def render_markdown(plan: Plan) -> str:
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
    lines += [f"| {p.number} | {p.title} | {p.dry_run} | {p.outcome} |" for p in plan.phases]
    hosts = sorted({_at(c.host, "local") for c in plan.changes})
    for host in hosts:
        changes = [c for c in plan.changes if _at(c.host, "local") == host]
        lines += ["", f"<details><summary><b>{_md(host)}</b>: {len(changes)} change(s)"
                      f"</summary>", ""]
        for change in changes:
            lines += [f"**{change.action}** `{change.target}` ({_flags(change)})", "",
                      "```diff", change.diff.rstrip("\n").replace("```", "ˋˋˋ"), "```", ""]
        lines.append("</details>")
    if plan.unassessed:
        lines += ["", "#### Unassessed", ""]
        lines += [f"- {u.phase} on {_md(_at(u.host, 'cluster'))}: {_md(u.reason)}"
                  for u in plan.unassessed]
    if plan.warnings:
        lines += ["", "#### Warnings", ""] + [f"- {_md(str(w))}" for w in plan.warnings]
    if plan.problems:
        lines += ["", "#### Problems", ""] + [f"- {_md(str(p))}" for p in plan.problems]
    return printable("\n".join(lines) + "\n")


def _md(text: str) -> str:
    """Plain text inside markdown: no accidental formatting, no HTML from host data."""
    return text.replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


COMMENT_LIMIT = 65_000  # a pull-request comment on the common forges holds 65,536


def split_markdown(text: str, limit: int = COMMENT_LIMIT) -> list[str]:
    """Cut a markdown plan into parts under `limit` characters, each readable alone: a cut
    inside a diff block or a collapsible host section closes it and reopens it in the next
    part. Whole host sections are kept together when they fit."""
    reserve = 200  # for the part header and the closing/reopening lines
    if len(text) <= limit:
        return [text]
    parts: list[list[str]] = [[]]
    size = 0
    fence = details = False
    lines = text.splitlines(keepends=True)
    for index, line in enumerate(lines):
        section = _section_size(lines, index) if line.startswith("<details>") else len(line)
        if size + min(section, limit - reserve) > limit - reserve and parts[-1]:
            if fence:
                parts[-1].append("```\n")
            if details:
                parts[-1].append("</details>\n")
            parts.append([])
            size = 0
            if details:
                parts[-1].append("<details><summary>(continued)</summary>\n\n")
            if fence:
                parts[-1].append("```diff\n")
        parts[-1].append(line[: limit - reserve])
        size += len(line)
        if line.startswith("```"):
            fence = not fence
        elif line.startswith("<details>"):
            details = True
        elif line.startswith("</details>"):
            details = False
    total = len(parts)
    return [f"_cargoship plan, part {i} of {total}_\n\n" + "".join(part)
            for i, part in enumerate(parts, 1)]


def _section_size(lines: list[str], start: int) -> int:
    size = 0
    for line in lines[start:]:
        size += len(line)
        if line.startswith("</details>"):
            break
    return size
