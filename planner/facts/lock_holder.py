"""The exclusive host lock as the planner sees it: who holds it and how fresh it is.

The executor creates and touches the lock; a plan only reads it, to warn when another run
holds it. A lock untouched for more than STALE_AFTER seconds may be taken over.

Everything cargoship keeps on a host is root's alone: LOCK_DIR and STATE_DIR are 0700
root:root and what LOCK_DIR holds is 0600 root. A file an unprivileged local user can open
is a file that user can flock, and a lock that user holds stalls every run (or, before the
restart script's bounded waits, released an orphaned restart whenever the user let go).
So the directories are checked before every use, never assumed (GUARD): a directory or
file owned by anyone but root, writable by anyone but root, or a link is refused, with
one line naming it, and nothing is changed. A root-owned directory that others can only
read (an earlier cargoship made LOCK_DIR 0755 and its files 0644) is tightened by the
executor, never by a plan.
"""

from __future__ import annotations

import base64
import binascii
import getpass
import json
import os
import shlex
import socket
from dataclasses import dataclass
from typing import Any

# Named here too, as every reader of the lock imports them (host_paths.py holds them all).
from ..host_paths import LOCK_DIR as LOCK_DIR
from ..host_paths import LOCK_PATH as LOCK_PATH
from ..host_paths import STATE_DIR as STATE_DIR
from ..host_paths import SWAP_LOCK_PATH as SWAP_LOCK_PATH
from ..hosts.batch import UID, Fact, FactParseError, Output, quote
from ..hosts.shell import load, script, variables
from .bounds import check_size

TOUCH_EVERY = 30
STALE_AFTER = 60
# SWAP_LOCK_PATH is held (flock, exclusive) by an engine restart's remote script from
# before it stops the engine until it has asked for the start: the files are changing. A
# host snapshot waits for it (shared), so a plan never reads a host halfway through a
# change. STATE_DIR holds the in-progress marker, the apply records and the backups
# (planner.facts.interrupted, executor.records, executor.file_writes).

# The checks themselves (`cs_dir`, `cs_guard`) are shell: planner/facts/sh/guard.sh.


def guard(owner: int = 0) -> str:
    """The guard's functions, holding the directories to being `owner`'s alone. Root on
    every host: only Place (a temporary directory, for the unit tests that run the lock
    scripts as the user running them) asks for another."""
    return variables({"OWNER_UID": int(owner)}) + load("planner.facts", "guard.sh")


GUARD = guard()


@dataclass(frozen=True)
class Place:
    """Where the lock and the state are kept, and whose alone they must be. On a host
    always HOST: no command line, config or host ever chooses another. Another place lets
    the unit tests run the real lock scripts, as they are, in a temporary directory of
    the user running them, in milliseconds (tests/unit/test_lock_script.py)."""

    lock_dir: str = LOCK_DIR
    state_dir: str = STATE_DIR
    owner: int = 0  # uid
    group: int = 0  # gid: what the executor's writes give their backup directories

    @property
    def lock_path(self) -> str:
        return f"{self.lock_dir}/lock"

    def values(self) -> dict[str, str | int]:
        """The generated block's share of a script that runs the guard (cs_guard)."""
        return {"OWNER_UID": self.owner, "LOCK_DIR": self.lock_dir,
                "STATE_DIR": self.state_dir}


HOST = Place()


@dataclass(frozen=True)
class LockState:
    holder: dict[str, Any] | None  # None: no lock file
    age: float  # seconds since the lock was last touched (host clock)

    @property
    def live(self) -> bool:
        return self.holder is not None and self.age <= STALE_AFTER

    def describe(self) -> str:
        if self.holder is None:
            return "not locked"
        h = self.holder
        return (f"{h.get('holder', '?')} (lock {h.get('id', '?')}, plan {h.get('plan_id', '?')}, "
                f"pid {h.get('pid', '?')}, since {h.get('since', '?')}, "
                f"touched {self.age:.0f}s ago)")


# The listing's most: a line of two times (or `unsafe` and a reason naming paths), and the
# base64 of the 4096 bytes the command reads of the lock.
MAX_OUTPUT = 16 << 10


def _seconds(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _parse(out: Output) -> LockState:
    lines = check_size(out, MAX_OUTPUT, "the lock listing").splitlines()
    if lines[:1] == ["none"]:
        return LockState(None, 0.0)
    if lines and lines[0].startswith("unsafe "):
        # A problem of the host, not a lock: an apply would refuse it (executor.host_lock).
        raise FactParseError(lines[0].removeprefix("unsafe ")[:300])
    head = lines[0].split() if lines else []
    if len(head) != 3 or head[0] != "lock" or len(lines) < 2:
        raise FactParseError("unreadable lock file listing")
    touched, now = _seconds(head[1]), _seconds(head[2])
    age = now - touched if touched is not None and now is not None else 0.0
    try:
        holder = json.loads(base64.b64decode(lines[1], validate=True))
    except (ValueError, binascii.Error, RecursionError):
        # A corrupt lock still locks: report it as held by an unknown run. (The times
        # alone unreadable made the old fallback raise the same ValueError again; json
        # recurses once per level, so 4096 bytes of "[" were a RecursionError.)
        holder = None
    if not isinstance(holder, dict):
        holder = {"holder": "unknown (corrupt lock file)"}
    return LockState(holder, age)


def _look() -> str:
    """The lock as root sees it, after the same checks as the executor's (changing
    nothing): `unsafe <why>`, `none`, or `lock <mtime> <now>` and its content
    (planner/facts/sh/lock_look.sh)."""
    return script("planner.facts", ("guard.sh", "lock_look.sh"),
                  {**HOST.values(), "LOCK_PATH": HOST.lock_path})


# The plan reads the lock as the SSH user (phases/acquire_lock.py), and only root may look into
# LOCK_DIR: a non-root user looks through `sudo -n`. Without passwordless sudo it looks
# as itself (LOCK_DIR's own owner and mode are visible to anyone; its lock is not, so the
# answer is `none`), and Validate hosts says that sudo is missing.
LOCK: Fact[LockState] = Fact(
    "lock",
    f"look={quote(_look())}\n"
    f'if [ "{UID}" != 0 ] && out=$(sudo -n -- sh -c "$look" 2>/dev/null); then '
    "printf '%s\\n' \"$out\"; else (eval \"$look\"); fi",
    _parse,
)


def whoami() -> str:
    """Who takes a lock, as its holder is shown: user@machine."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no USER variable (some containers)
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def unlock_command(config_file: str, lock_id: str) -> str:
    """The force-unlock command for a lock, as a user can paste it."""
    return f"cargoship force-unlock -c {shlex.quote(config_file)} {shlex.quote(lock_id)}"
