"""Atomic file writes on a host, with the previous content kept as a backup.

One round trip per file: the content arrives on stdin (never on the command line), goes to
a temp file in the target's own directory (so the final rename is atomic on the same
filesystem), is flushed to disk, given the mode and owner it must have, and renamed over
the target. The previous content, if any, is first copied to the backup directory. A
failure at any step removes the temp file and leaves the target as it was.

Nothing is written, copied or removed through a link: a target (or its directory, or the
backup directories) that is a symbolic link or not a regular file makes the step fail with
nothing changed. Backups are regular-file copies (`cp -P` never copies a link's target, and
the copy is checked), under a root-only (0700) directory.

The first backup a plan takes of a path wins: a write run again (after a reconnection, when
the first run's answer was lost) must not back up the content that run just wrote. A path
that did not exist gets an `.absent` marker instead, so the run again still knows that a
restore means removing the file.

The shell is executor/sh/files.sh (the functions, shared with the restart script) and
one executor/sh/files_<operation>.sh per script; Python renders only the generated block
of variables on top.

Backup retention: when a plan takes its first backup on a host, the backups of all but the
newest KEEP_BACKUPS plans on that host (that one included) are removed. A plan interrupted
on a host is at most the second newest when the plan that recovers it takes its backups,
so what a recovery may restore is never pruned.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.facts.interrupted import BACKUPS
from planner.facts.lock_holder import HOST, Place
from planner.hosts.shell import script
from planner.safetext import decimal

from .remote import HostWriter

BACKUP_ROOT = "/var/lib/cargoship/backups"
KEEP_BACKUPS = 5
NOT_REGULAR_EXIT = 3


@dataclass(frozen=True)
class Written:
    path: str
    backup: str | None  # where the previous content is; None when there was none


def backup_path(plan_id: str, path: str, place: Place = HOST) -> str:
    """Backups are kept per plan, under the target's own path, so a restore is exact."""
    return f"{backup_root(place)}/{plan_id}{path}"


def values(place: Place = HOST) -> dict[str, str | int]:
    """The generated block's share of a script that runs executor/sh/files.sh. `place`:
    HOST on every host (another only for the unit tests that run these scripts in a
    temporary directory)."""
    root = backup_root(place)
    return {"BACKUP_ROOT": root, "RECORD_PREFIX": place.state_dir + "/",
            "KEEP_BACKUPS": KEEP_BACKUPS, "NOT_REGULAR": NOT_REGULAR_EXIT,
            "ROOT_IDS": f"{place.owner}:{place.group}"}


def backup_root(place: Place = HOST) -> str:
    """BACKUP_ROOT on every host."""
    return f"{place.state_dir}/backups"


def _script(op: str, given: dict[str, str | int], place: Place) -> str:
    """The generated block, the functions (executor/sh/files.sh), then the operation's own
    line (executor/sh/files_<op>.sh)."""
    return script("executor", ("files.sh", f"files_{op}.sh"), {**values(place), **given})


def write_script(path: str, *, mode: int, plan_id: str, owner: str = "0:0",
                 source: str = "cat", place: Place = HOST) -> str:
    """The script that writes `path` from its stdin (`source` "base64 -d": from its
    base64) and prints `backup` when it kept a previous content: cs_stage then cs_commit
    (executor/sh/files.sh)."""
    decode = {"cat": "cat", "base64 -d": "base64"}[source]
    return _script("write", {"FILE": path, "MODE": f"{mode:04o}", "OWNER": owner,
                             "PLAN": plan_id, "DECODE": decode}, place)


def written(path: str, plan_id: str, stdout: bytes, place: Place = HOST) -> Written:
    """What a write script's output says about the backup it kept."""
    return Written(path, backup_path(plan_id, path, place) if b"backup" in stdout else None)


def write_file(host: HostWriter, path: str, content: bytes, *, mode: int, plan_id: str,
               owner: str = "0:0") -> Written:
    result = host.run_root(write_script(path, mode=mode, plan_id=plan_id, owner=owner),
                           stdin=content)
    return written(path, plan_id, result.stdout)


def restore_script(item: Written, place: Place = HOST) -> str:
    """Put the previous content back (or remove a file that did not exist before)."""
    return _script("restore", {"FILE": item.path, "BACKUP": item.backup or ""}, place)


def restore_file(host: HostWriter, item: Written) -> None:
    host.run_root(restore_script(item))


def remove_script(path: str, *, plan_id: str, place: Place = HOST) -> str:
    """Delete a file cargoship created, keeping its content as a backup for a restore."""
    return _script("remove", {"FILE": path, "PLAN": plan_id}, place)


def remove_file(host: HostWriter, path: str, *, plan_id: str) -> Written:
    host.run_root(remove_script(path, plan_id=plan_id))
    return Written(path, backup_path(plan_id, path))


def restore_tree_script(backup_dir: str, place: Place = HOST) -> str:
    """Put back every file a plan backed up on this host (and remove the ones that did not
    exist before it: their `.absent` markers); prints how many paths were restored. For a
    host an apply was killed while rolling back: its backups are the state before that
    apply."""
    if place == HOST and not BACKUPS.fullmatch(backup_dir):
        raise ValueError(f"not a backup directory of cargoship's: {backup_dir!r}")
    return _script("restore_tree", {"BACKUP": backup_dir}, place)


def restore_tree(host: HostWriter, backup_dir: str) -> int:
    out = host.run_root(restore_tree_script(backup_dir)).stdout.decode().strip()
    return decimal(out) or 0
