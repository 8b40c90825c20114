"""The file changes a restart script makes (swap_script.py): one Step each, an operation
of executor/sh/files.sh run on the host, and what a rollback needs to undo it."""

from __future__ import annotations

import base64
from dataclasses import dataclass

from planner.facts.lock_holder import HOST, Place

from . import file_writes
from .file_writes import Written, backup_path, written


@dataclass(frozen=True)
class Step:
    """One change of a file: an operation of executor/sh/files.sh, run in its own
    subshell (set -eu)."""

    verb: str  # what the progress note says: wrote, removed, restored
    path: str  # the file (restore_tree: the backup directory)
    op: str  # write (staged long before the stop), remove, restore, restore_tree
    content: bytes | None = None  # a write's new content
    plan_id: str = ""
    mode: int = 0o600
    backup: str = ""  # restore: the backup to put back ("": the file did not exist)
    place: Place = HOST

    def written(self, result: str) -> Written | None:
        """What a restore needs to undo this step, from the step's result word."""
        if self.verb == "wrote":
            return written(self.path, self.plan_id, result.encode(), self.place)
        if self.verb == "removed":
            return Written(self.path, backup_path(self.plan_id, self.path, self.place))
        return None  # restores are not undone

    def values(self, index: int) -> dict[str, str | int]:
        content = base64.encodebytes(self.content).decode().rstrip("\n") \
            if self.content is not None else ""
        file = self.path if self.op != "restore_tree" else ""
        backup = self.backup if self.op != "restore_tree" else self.path
        return {f"OP_{index}": self.op, f"FILE_{index}": file,
                f"MODE_{index}": f"{self.mode:04o}",
                f"OWNER_{index}": f"{self.place.owner}:{self.place.group}",
                f"PLAN_{index}": self.plan_id, f"BACKUP_{index}": backup,
                f"CONTENT_{index}": content}


def write_step(path: str, content: bytes, *, mode: int, plan_id: str,
               place: Place = HOST) -> Step:
    return Step("wrote", path, "write", content, plan_id, mode, place=place)


def remove_step(path: str, *, plan_id: str, place: Place = HOST) -> Step:
    return Step("removed", path, "remove", plan_id=plan_id, place=place)


def restore_step(item: Written, place: Place = HOST) -> Step:
    return Step("restored", item.path, "restore", backup=item.backup or "", place=place)


def restore_tree_step(backup_dir: str, place: Place = HOST) -> Step:
    if place == HOST:
        file_writes.restore_tree_script(backup_dir)  # refuses what is not a backup directory
    return Step("restored", backup_dir, "restore_tree", place=place)
