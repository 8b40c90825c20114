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
import shlex
import socket
from dataclasses import dataclass
from typing import Any

# Named here too, as every reader of the lock imports them (host_paths.py holds them all).
from ..host_paths import LOCK_DIR as LOCK_DIR
from ..host_paths import LOCK_PATH as LOCK_PATH
from ..host_paths import STATE_DIR as STATE_DIR
from ..host_paths import SWAP_LOCK_PATH as SWAP_LOCK_PATH
from ..hosts.batch import Fact, FactParseError, Output, quote
from .bounds import check_size

TOUCH_EVERY = 30
STALE_AFTER = 60
# SWAP_LOCK_PATH is held (flock, exclusive) by an engine restart's remote script from
# before it stops the engine until it has asked for the start: the files are changing. A
# host snapshot waits for it (shared), so a plan never reads a host halfway through a
# change. STATE_DIR holds the in-progress marker, the apply records and the backups
# (planner.facts.interrupted, executor.records, executor.files).

# `cs_dir DIR check|fix f|fd`: returns 1 with a one-line reason in $why when DIR, its
# parent or an entry of DIR is a link, is owned by anyone but root or is writable by
# anyone but root; entries must be regular files (f) or files and directories (fd).
# `fix` (the executor) creates DIR 0700 when absent and takes group and world access away
# from DIR (and, for f, from its files); `tighten` does the same to a DIR that exists,
# creating none; `check` (a plan) changes nothing. Octal in $(( ))
# is POSIX; stat -c is GNU and busybox alike. No `local` (not POSIX): cs_ prefixes. An
# entry gone between the listing and its look (`cs_gone`: a racing run's lock temp,
# renamed into place under the mutex) has nothing left to judge.
_GUARD = r"""cs_gone() { [ ! -e "$1" ] && [ ! -L "$1" ]; }
cs_own() {
  if [ -L "$1" ]; then why="$1 is a symbolic link"; return 1; fi
  case $2 in
    d) [ -d "$1" ] || { why="$1 is not a directory"; return 1; };;
    f) [ -f "$1" ] || { why="$1 is not a regular file"; return 1; };;
    *) [ -f "$1" ] || [ -d "$1" ] || { why="$1 is neither a file nor a directory"; return 1; };;
  esac
  cs_s=$(stat -c '%u %a' -- "$1" 2>/dev/null) || { why="cannot stat $1"; return 1; }
  cs_u=${cs_s% *}; cs_m=${cs_s#* }
  if [ "$cs_u" != @OWNER@ ]; then why="$1 is owned by uid $cs_u"; return 1; fi
  if [ $((0$cs_m & 022)) -ne 0 ]; then why="$1 is mode 0$cs_m (writable by others)"; return 1; fi
}
cs_dir() {
  why=
  if ! cs_own "${1%/*}" d; then why="$why: refusing to use $1"; return 1; fi
  if [ "$2" = fix ] && cs_gone "$1" && ! ( umask 077; mkdir -- "$1" 2>/dev/null ) &&
      cs_gone "$1"; then  # made meanwhile by a racing run: judged below like any other
    why="cannot create $1"; return 1
  fi
  [ -e "$1" ] || [ -L "$1" ] || return 0
  if ! cs_own "$1" d; then why="$why: refusing to use it (it must be root's alone)"; return 1; fi
  cs_dm=$cs_m
  for cs_f in "$1"/* "$1"/.[!.]* "$1"/..?*; do
    cs_gone "$cs_f" && continue
    if ! cs_own "$cs_f" "$3"; then
      cs_gone "$cs_f" && continue
      why="$why: refusing to use $1"; return 1
    fi
    if [ "$2" != check ] && [ "$3" = f ] && [ $((0$cs_m & 077)) -ne 0 ] &&
        ! chmod go= -- "$cs_f" 2>/dev/null && ! cs_gone "$cs_f"; then
      why="cannot make $cs_f root's alone"; return 1
    fi
  done
  if [ "$2" != check ] && [ $((0$cs_dm & 077)) -ne 0 ]; then
    chmod go= -- "$1" || { why="cannot make $1 root's alone"; return 1; }
  fi
  return 0
}
"""


def guard(owner: int = 0) -> str:
    """GUARD, holding the directories to being `owner`'s alone. Root on every host: only
    Place (a temporary directory, for the unit tests that run the lock scripts as the
    user running them) asks for another."""
    return _GUARD.replace("@OWNER@", str(int(owner)))


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

    @property
    def lock_path(self) -> str:
        return f"{self.lock_dir}/lock"


HOST = Place()


def guard_lines(mode: str, fail: str, place: Place = HOST) -> str:
    """Shell lines checking (mode "check") or also creating and tightening ("fix")
    LOCK_DIR and STATE_DIR; `fail` runs, with the reason in $why, when one is unsafe.
    Both are checked before either is fixed: a refusal changes nothing."""
    lock_dir, state_dir = quote(place.lock_dir), quote(place.state_dir)
    calls = [f"! cs_dir {d} check {kind}" for d, kind in ((lock_dir, "f"), (state_dir, "fd"))]
    if mode == "fix":
        # STATE_DIR is made when something is kept there (a marker, a record): a lock taken
        # by an apply that is then refused leaves nothing behind.
        calls += [f"! cs_dir {lock_dir} fix f", f"! cs_dir {state_dir} tighten fd"]
    return guard(place.owner) + f"if {' || '.join(calls)}; then {fail}; fi\n"


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
        # A problem of the host, not a lock: an apply would refuse it (executor.lock).
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
    nothing): `unsafe <why>`, `none`, or `lock <mtime> <now>` and its content."""
    return (guard_lines("check", 'echo "unsafe $why"; exit 0') +
            f"p={quote(LOCK_PATH)}\n"
            'if [ -f "$p" ]; then echo "lock $(stat -c %Y "$p") $(date +%s)"; '
            'head -c 4096 "$p" | base64 -w0; echo; else echo none; fi\n')


# The plan reads the lock as the SSH user (phases/lock.py), and only root may look into
# LOCK_DIR: a non-root user looks through `sudo -n`. Without passwordless sudo it looks
# as itself (LOCK_DIR's own owner and mode are visible to anyone; its lock is not, so the
# answer is `none`), and Validate hosts says that sudo is missing.
LOCK: Fact[LockState] = Fact(
    "lock",
    f"look={quote(_look())}\n"
    'if [ "$(id -u)" != 0 ] && out=$(sudo -n -- sh -c "$look" 2>/dev/null); then '
    "printf '%s\\n' \"$out\"; else (eval \"$look\"); fi",
    _parse,
)


def whoami() -> str:
    """Who takes a lock, as its holder is shown: user@machine."""
    return f"{getpass.getuser()}@{socket.gethostname()}"


def unlock_command(config_file: str, lock_id: str) -> str:
    """The force-unlock command for a lock, as a user can paste it."""
    return f"cargoship force-unlock -c {shlex.quote(config_file)} {shlex.quote(lock_id)}"
