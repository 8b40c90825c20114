"""What text and markdown share: changes grouped by what they do, host lists, the summary.

At 200 hosts the same registries.yaml change on every worker is one entry with a list of
hosts ("wrk-1..wrk-8"), not 200 copies of one diff.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..facts.distro import LAYOUTS
from ..plan.actions import (
    DELETE_FILE,
    DELETE_FILE_IN_PLACE,
    LABEL_NODE,
    MERGE_KUBECONFIG,
    RECOVER,
    RESTORE_BACKUP,
    UNLABEL_NODE,
    WRITE_FILE,
    WRITE_FILE_IN_PLACE,
)
from ..plan.model import NOT_READ, Change, HostRef, KeyChange, PhaseOutcome, Plan, Unassessed

FILE_ACTIONS = (WRITE_FILE, WRITE_FILE_IN_PLACE, DELETE_FILE, DELETE_FILE_IN_PLACE)

CHART_VALUES = "Chart values (HelmChartConfig, written in place)"
_MANIFEST_DIRS = tuple(f"{layout.manifests_dir}/" for layout in LAYOUTS.values())
# A name's number at its end, ASCII digits only and 18 at most: int() of a longer string
# (a plan file is anyone's text) costs quadratic time, and over 4300 digits it refuses.
_NUMBERED = re.compile(r"(.*?)([0-9]{1,18})")


def host_name(change: Change) -> str | None:
    """The name of the host a change is for (None: this machine). The one place render
    reads a change's host."""
    return bare_name(change.host)


def bare_name(host: HostRef | None) -> str | None:
    """`wrk-1` of the host `wrk-1 (10.0.0.21)` (findings and unassessed items)."""
    return host.name if host else None


def label(host: HostRef | None) -> str | None:
    """A host as people read it: `wrk-1 (10.0.0.21)`, the port too unless 22."""
    return str(host) if host else None


@dataclass(frozen=True)
class ChangeGroup:
    """One change, the same on every host listed."""

    change: Change  # the first host's; the others' differ only in their host
    hosts: tuple[str | None, ...]


def section(change: Change) -> str:
    """Where a change is listed: chart values under their own heading (the engine's helm
    controller applies them, in place), anything else under the phase that planned it."""
    if change.target.startswith(_MANIFEST_DIRS) and not change.restart:
        return CHART_VALUES
    return change.phase


def grouped(changes: Sequence[Change]) -> list[ChangeGroup]:
    """Changes that are the same but for their host, once each, in order of first sight."""
    found: dict[tuple[object, ...], list[Change]] = {}
    for change in changes:
        key = (section(change), change.action, change.target, change.diff,
               change.key_changes, change.drain, change.restart)
        found.setdefault(key, []).append(change)
    return [ChangeGroup(same[0], tuple(host_name(c) for c in same)) for same in found.values()]


def host_list(hosts: Sequence[str | None]) -> str:
    """`wrk-1..wrk-8, ctl-2, edge-a`: runs of 3 or more consecutive numbers as ranges,
    names in natural order; None is this machine."""
    named = sorted({h for h in hosts if h is not None}, key=_natural)
    parts: list[str] = []
    run: list[str] = []

    def flush() -> None:
        parts.extend([f"{run[0]}..{run[-1]}"] if len(run) >= 3 else run)
        run.clear()

    for name in named:
        if run and _follows(run[-1], name):
            run.append(name)
        else:
            flush()
            run.append(name)
    flush()
    if None in hosts:
        parts.append("this machine")
    return ", ".join(parts)


def on_hosts(group: ChangeGroup) -> str:
    if len(group.hosts) == 1:
        return f"on {host_list(group.hosts)}"
    return f"on {host_list(group.hosts)} (same change on {len(group.hosts)} hosts)"


def _natural(name: str) -> tuple[str, int, str]:
    match = _NUMBERED.fullmatch(name)
    return (match.group(1), int(match.group(2)), name) if match else (name, -1, name)


def _follows(previous: str, name: str) -> bool:
    a, b = _NUMBERED.fullmatch(previous), _NUMBERED.fullmatch(name)
    return bool(a and b and a.group(1) == b.group(1)
                and int(b.group(2)) == int(a.group(2)) + 1)


def flags(change: Change) -> str:
    if not change.restart:
        return "in place"
    return "drain + restart" if change.drain else "restart, no drain"


def flagged_hosts(plan: Plan) -> set[str]:
    """Hosts named by a problem or a warning: their preflight detail is always shown."""
    return {str(n.host) for n in (*plan.problems, *plan.warnings) if n.host is not None}


def no_changes(plan: Plan) -> bool:
    return not plan.changes and not plan.unassessed and not plan.problems


def summary_line(plan: Plan) -> str:
    """Terraform's shape, cargoship's nouns."""
    if no_changes(plan):
        return "No changes. Every host matches the desired engine config."
    files = [c for c in plan.changes if c.action in FILE_ACTIONS]
    hosts = {host_name(c) for c in plan.changes if c.host is not None}
    restarts = {host_name(c) for c in plan.changes if c.restart}
    labels = [c for c in plan.changes if c.action in (LABEL_NODE, UNLABEL_NODE)]
    text = (f"Plan: {_count(len(files), 'file')} to change on {_count(len(hosts), 'host')}, "
            f"{_count(len(restarts), 'restart')}, {_count(len(labels), 'label')}, "
            f"{len(plan.unassessed)} unassessed")
    recover = sum(c.action in (RECOVER, RESTORE_BACKUP) for c in plan.changes)
    if recover:
        text += f", {_count(recover, 'interrupted apply')} to finish"
    if any(c.action == MERGE_KUBECONFIG for c in plan.changes):
        text += ", 1 local kubeconfig to update"
    return text + "."


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def key_line(key: KeyChange, source: str | None = None) -> tuple[str, str]:
    """(sigil, text) of one key change, Terraform's way: + added, - removed, ~ changed.
    `source`: where a secret's new value comes from (`from file /p`), said beside it."""
    note = f"  ({source})" if source else ""
    if key.op == "add":
        return "+", f"{key.path}: {key.after}{note}"
    if key.op == "remove":
        return "-", f"{key.path}: {key.before}"
    return "~", f"{key.path}: {key.before} -> {key.after}{note}"


def notes(change: Change) -> list[str]:
    """The planner's own notes in a diff (`# mode 644 -> 600`): a diff line never starts
    with `#`, so these can't be mistaken for content."""
    return [line for line in change.diff.splitlines() if line.startswith("#")]


def host_counts(plan: Plan, phase: PhaseOutcome) -> tuple[int, str]:
    """(hosts ok, ", 2 failed (a, b), 1 skipped (c: failed an earlier phase)") of a phase
    that reads hosts one by one (Plan.host_counts, as --json has them); the text is "" when
    no host of the plan failed there or before it."""
    counts = plan.host_counts(phase)
    if counts is None:  # a phase that says nothing per host (Disconnect)
        return 0, ""
    text = ""
    if counts.failed:
        text += f", {len(counts.failed)} failed ({host_list([h.name for h in counts.failed])})"
    if counts.skipped:
        text += (f", {len(counts.skipped)} skipped "
                 f"({host_list([h.name for h in counts.skipped])}: failed an earlier phase)")
    return counts.ok, text


def not_assessed(plan: Plan, phase: str) -> list[tuple[str, str]]:
    """(where, reason) per distinct reason of a phase's unassessed items: the hosts that
    share it, listed once. Hosts that were never read say so: ("not assessed on a, b",
    "unreachable")."""
    by_reason: dict[str, list[Unassessed]] = {}
    for item in plan.unassessed:
        if item.phase == phase:
            by_reason.setdefault(item.reason, []).append(item)
    found = []
    for reason, items in by_reason.items():
        hosts = [bare_name(i.host) for i in items]
        where = ", ".join(w for w in (host_list([h for h in hosts if h]),
                                      "cluster" if None in hosts else "") if w)
        found.append((where, reason))
    return found


def unassessed_line(where: str, reason: str) -> str:
    if reason.startswith(NOT_READ):
        return f"not assessed on {where} ({reason.removeprefix(NOT_READ)})"
    return f"{where}  unassessed: {reason}"
