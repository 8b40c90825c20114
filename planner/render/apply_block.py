"""The "Apply will" block of a plan, as text and as markdown (what goes in it: choices.py).

Values that are not the default come first, each on its own line, flagged `!` and saying
`NOT the default` and what they do, so that they can't be read past; the defaults follow
in one line (`full`: one line each, with what they do). Then every secret's source.
"""

from __future__ import annotations

from ..plan.model import Plan
from ..safetext import md
from .choices import HEADING, NOT_IN_PLAN, SECRETS_HEADING, Choice, choices, sources

FLAG = "NOT the default"


def _heading(found: list[Choice]) -> str:
    unusual = sum(c.flagged for c in found)
    if not unusual:
        return f"{HEADING} (every option at its default)"
    return f"{HEADING} ({unusual} option{'s' if unusual > 1 else ''} {FLAG})"


def _flagged(choice: Choice) -> str:
    return (f"{choice.name}: {choice.value}  ({FLAG}, which is {choice.default}: "
            f"{choice.meaning})")


def _wrapped(first: str, items: list[str], width: int = 96) -> list[str]:
    """`first` and the items, comma-separated, in lines of about `width`: never broken
    inside an item (a name apart from its value reads as two settings)."""
    lines, line = [], f"    {first}"
    for index, item in enumerate(items):
        item += "," if index < len(items) - 1 else ""
        if len(line) + 1 + len(item) > width and line.strip() != first:
            lines.append(line)
            line = "      " + item
        else:
            line += " " + item
    return [*lines, line]


def text_block(plan: Plan, full: bool) -> list[tuple[bool, str]]:
    """(flagged, line) of the block, without a trailing blank line."""
    found = choices(plan)
    lines = [(False, f"{_heading(found)}:")]
    lines += [(True, f"  ! {_flagged(c)}") for c in found if c.flagged]
    usual = [c for c in found if not c.flagged]
    if full:
        lines += [(False, f"    {c.name}: {c.value}  (default: {c.meaning})") for c in usual]
    elif usual:
        lines += [(False, line) for line in _wrapped(
            "at their defaults:", [f"{c.name}: {c.value}" for c in usual])]
    secrets = sources(plan)
    if secrets:
        lines.append((False, f"{SECRETS_HEADING}:"))
        for s in secrets:
            if s.warning:
                lines.append((True, f"  ! {s.where}: {s.source}  ({s.warning})"))
            else:
                lines.append((False, f"    {s.where}: {s.source}"))
    if full:
        lines.append((False, f"{NOT_IN_PLAN}."))
    return lines


def _code(text: str) -> str:
    """Inline code that can't end early: a backtick in a value can't close the span."""
    return f"`{text.replace('`', 'ˋ')}`"


def markdown_block(plan: Plan, full: bool) -> list[str]:
    found = choices(plan)
    lines = [f"#### {_heading(found)}", ""]
    lines += [f"- ⚠️ **{_code(f'{c.name}: {c.value}')}**, **{FLAG}**, which is "
              f"{_code(c.default)}: {md(c.meaning)}" for c in found if c.flagged]
    usual = [c for c in found if not c.flagged]
    if full:
        lines += [f"- {_code(f'{c.name}: {c.value}')} (default): {md(c.meaning)}"
                  for c in usual]
    elif usual:
        lines.append("- At their defaults: " + ", ".join(_code(f"{c.name}: {c.value}")
                                                       for c in usual))
    secrets = sources(plan)
    if secrets:
        lines += ["", f"{SECRETS_HEADING}:", ""]
        for s in secrets:
            kind, _, name = s.source.partition(" ")
            where = f"{_code(s.where)}: " + (f"{kind} {_code(name)}" if kind in ("env", "file")
                                              else md(s.source))
            lines.append(f"- ⚠️ **{where}**: {md(s.warning)}" if s.warning
                         else f"- {where}")
    if full:
        lines += ["", f"<sub>{md(NOT_IN_PLAN)}.</sub>"]
    return lines
