"""What a reviewer reads in a plan must be what the plan does.

A plan's diffs are stored text: someone who edits a plan and recomputes its digest could
make a harmless-looking diff stand for a harmful desired state. So a plan is checked on
read: every line on the new side of a file's diff (context and "+" lines, hunk by hunk) must
be the file the plan's own desired state renders at that line, secrets masked the same
way; a created file's diff must show all of it; a deletion's text is the fixed one; the
mode and owner a note promises must be the desired ones. The old side is what the host had:
only a host can vouch for it, and apply does (it plans again and refuses a plan whose diffs
differ from what it finds; see executor.drift).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from ..config.model import ClusterConfig, Engine
from ..desired.compare import deletion, shown_desired, shown_structure
from ..desired.engine_files import (
    PLACEMENT_READ,
    DesiredFile,
    Placement,
    default_placement,
    wanted_files,
)
from ..desired.keys import leaves
from ..facts.distro import LAYOUTS
from ..safetext import octal
from .actions import DELETE_FILE, DELETE_FILE_IN_PLACE, WRITE_FILE, WRITE_FILE_IN_PLACE
from .desired import stand_in_secrets
from .model import Change, Plan

# ASCII digits, nine at most: a plan file is anyone's text, and int() refuses a digit string
# of over 4300 digits with a bare ValueError (a header it does not match is malformed).
_HUNK = re.compile(r"^@@ -([0-9]{1,9})(?:,([0-9]{1,9}))? \+([0-9]{1,9})(?:,([0-9]{1,9}))? @@")
_MASKS = re.compile(r"'\*\*\* \(changed\)'")
_MASKS_JSON = re.compile(r'"\*\*\* \(changed\)"')
FILE_WRITES = (WRITE_FILE, WRITE_FILE_IN_PLACE)
FILE_DELETES = (DELETE_FILE, DELETE_FILE_IN_PLACE)


def problems(plan: Plan) -> Iterator[str]:
    # Only what renders files: a plan's hosts and options need not be complete for that.
    config = ClusterConfig(path=Path("<plan>"), name=plan.cluster, hosts=(),
                           engine=Engine(plan.desired["engine"]["distro"],
                                         plan.desired["engine"]["version"]),
                           engine_config=stand_in_secrets(plan.desired["engineConfig"]))
    layout = LAYOUTS[config.engine.distro]
    # A host's role, and where its engine reads cargoship's files (the plan's read of it).
    roles = {h.ref.key: (h.role, h.reads.get(PLACEMENT_READ)) for h in plan.hosts}
    targets = [c.target for c in plan.changes if c.action == WRITE_FILE_IN_PLACE]
    by_role = {(role, at): wanted_files(
                   config, role, Placement.decode(at) if at else default_placement(layout),
                   targets)
               for role, at in set(roles.values())}
    for change in plan.changes:
        where = f"change of {change.target} on {change.host or 'local'}"
        if change.action in FILE_DELETES:
            if change.diff != deletion(change.target).diff:
                yield f"{where}: its text is not the deletion's"
        elif change.action in FILE_WRITES:
            role = roles.get(change.host.key) if change.host else None
            wanted = by_role.get(role, {}).get(change.target) if role else None
            if wanted is None:
                yield f"{where}: the plan's desired state writes no such file there"
                continue
            reason = _diff_problem(change, wanted) or _keys_problem(change, wanted)
            if reason:
                yield f"{where}: {reason}"


def _diff_problem(change: Change, wanted: DesiredFile) -> str | None:
    expected = shown_desired(wanted).splitlines()
    lines = change.diff.splitlines()
    position, shown = 0, 0
    if lines and not lines[0].startswith("# "):  # only a note: the content is the same
        if lines[:2] != [f"--- {wanted.path} (live)", f"+++ {wanted.path} (desired)"]:
            return "its diff is not of that file"
        position = 2
    while position < len(lines) and lines[position].startswith("@@"):
        match = _HUNK.match(lines[position])
        if not match:
            return "a malformed hunk header"
        old_count = int(match.group(2) or 1)
        new_start, new_count = int(match.group(3)), int(match.group(4) or 1)
        new_side: list[str] = []
        position += 1
        seen_old = 0
        while position < len(lines) and (seen_old < old_count or len(new_side) < new_count):
            line = lines[position]
            if line.startswith(" "):
                new_side.append(line[1:])
                seen_old += 1
            elif line.startswith("+"):
                new_side.append(line[1:])
            elif line.startswith("-"):
                seen_old += 1
            else:
                return "a hunk shorter than its header says"
            position += 1
        first = new_start - 1 if new_count else new_start
        if [_MASKS.sub("'***'", x) for x in new_side] != expected[first:first + new_count]:
            return f"its new side at line {new_start} is not what the plan would write"
        shown += new_count
    if change.before is None and shown != len(expected):  # a file created
        return "it does not show the whole file it would create"
    for note in lines[position:]:
        if not note.startswith("# "):
            return "text outside its hunks"
        problem = _note_problem(note, wanted)
        if problem:
            return problem
    return None


def _keys_problem(change: Change, wanted: DesiredFile) -> str | None:
    """Each key change a compact plan leads with must say what the desired state holds:
    an added or changed key its value there, a removed key gone from it. (That none was
    left out only the host can tell: apply compares them with what it finds.)"""
    after = leaves(shown_structure(wanted))
    for key in change.key_changes:
        value = after.get(key.path)
        if key.op == "remove" and value is not None:
            return f"its key change says {key.path} is removed; the plan keeps it"
        if key.op != "remove" and (value is None or _MASKS_JSON.sub('"***"', key.after or "")
                                   != value):
            return f"its key change for {key.path} is not what the plan would write"
    return None


def _note_problem(note: str, wanted: DesiredFile) -> str | None:
    for mode in re.findall(r"mode (?:\d+|\?) -> (\d+)", note) + re.findall(
            r"\(absent\) -> mode (\d+)", note):
        if octal(mode, 6) != wanted.mode:
            return f"it promises mode {mode[:12]}, the plan writes {wanted.mode:o}"
    for owner in re.findall(r"owner \S+ -> (\S+)", note) + re.findall(
            r", owner (\S+) \(uid:gid\)$", note):
        if owner != wanted.owner:
            return f"it promises owner {owner}, the plan writes {wanted.owner}"
    return None
