"""The exclusive host lock, as the executor takes, keeps and releases it.

The lock is one JSON file per host (planner.facts.lock_holder.LOCK_PATH), root's alone like
everything in its directory (0600 in a 0700 directory, checked before every use:
planner.facts.lock_holder.GUARD). Every check-then-change happens in ONE remote script, inside an
`flock` on a separate mutex file in the same directory: two runs racing for a host are
serialised by the host's kernel, so exactly one of them creates (or takes over) the lock.
Nobody else can open the mutex, so nobody else can hold it; the wait for it is bounded
all the same (MUTEX_WAIT). The new content is written to a temp file in the same
directory and renamed into place, so a reader never sees a half-written lock.

Freshness is measured on the host's clock only (file mtime against the host's
`date +%s`): the machines running cargoship may disagree with the hosts about the time.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import secrets
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType

from planner.errors import CargoshipError, CommandError
from planner.facts.lock_holder import (
    HOST,
    LOCK,
    LOCK_DIR,
    LOCK_PATH,
    STALE_AFTER,
    TOUCH_EVERY,
    LockState,
    Place,
    unlock_command,
    whoami,
)
from planner.hosts.batch import Output
from planner.hosts.shell import load, variables
from planner.hosts.ssh import CommandResult
from planner.threads import start

from .remote import HostWriter

log = logging.getLogger("cargoship.executor")

# Separate from the lock file itself: the lock file is replaced by rename, so an flock on
# it would guard an inode that is about to disappear.
MUTEX_PATH = LOCK_PATH + ".mutex"
# Seconds a lock script waits for the mutex: the scripts holding it run for milliseconds.
MUTEX_WAIT = 10
# Exit codes of a host script: LOCK_DIR or STATE_DIR is not root's alone (refused, nothing
# changed); a bounded wait for an flock ran out.
UNSAFE, WAIT_TIMEOUT = 10, 11
_ID_RE = re.compile(r"[0-9a-f]{1,64}")


@dataclass(frozen=True)
class LockInfo:
    id: str
    holder: str  # user@machine
    pid: int
    plan_id: str | None
    since: str  # UTC, ISO 8601

    def to_json(self) -> str:
        # "id" first, in a fixed layout: the host recognises its lock by this prefix
        # (see id_prefix), with sh alone and no JSON parser on the host.
        body = {"id": self.id, "holder": self.holder, "pid": self.pid,
                "plan_id": self.plan_id, "since": self.since}
        return json.dumps(body, separators=(", ", ": ")) + "\n"


def new_lock_info(plan_id: str | None) -> LockInfo:
    return LockInfo(
        id=secrets.token_hex(6),
        holder=whoami(),
        pid=os.getpid(),
        plan_id=plan_id,
        since=datetime.now(UTC).replace(microsecond=0).isoformat(),
    )


class LockHeld(CargoshipError):
    """Another run holds the lock of `host` and touched it recently."""

    def __init__(self, host: str, state: LockState, config_file: str = "cluster.yaml") -> None:
        self.host = host
        self.state = state
        holder = state.holder or {}
        self.lock_id: str | None = holder.get("id")
        hint = unlock_command(config_file, self.lock_id or "LOCK_ID")
        super().__init__(f"{host}: locked by {state.describe()}; wait for that run to end "
                         f"(--lock-timeout SECONDS), or if it crashed: {hint}")


def check_lock_id(lock_id: str) -> str:
    """A lock id reaches a remote script: accept only what new_lock_info makes (hex)."""
    if not _ID_RE.fullmatch(lock_id):
        raise CargoshipError(f"{lock_id!r} is not a lock id (expected lowercase hex, as "
                             "printed in the lock holder's message)")
    return lock_id


def id_prefix(lock_id: str) -> str:
    """How every lock file written with this id begins (LockInfo.to_json)."""
    return '{"id": "' + check_lock_id(lock_id) + '", '


def stale_seconds(stale_after: float) -> int:
    """Whole-second ages: `age > stale_after` is `age > floor(stale_after)`."""
    if stale_after < 0 or not math.isfinite(stale_after):
        raise ValueError(f"stale_after must be a finite number >= 0, not {stale_after}")
    return math.floor(stale_after)


# `cs_flock -x|-s FD SECONDS`, an flock whose wait is bounded (BusyBox's flock has no -w):
# executor/sh/flock.sh.
BOUNDED_FLOCK = load("executor", "flock.sh")


def _script_for(lock_id: str, part: str, values: dict[str, str | int],
                place: Place = HOST) -> str:
    """A lock script: the directories checked (created and made root's alone if need be),
    the mutex, `ours` (executor/sh/lock.sh), then `part`. `place`: HOST on every host
    (another only for the unit tests that run these scripts locally)."""
    block = variables({**place.values(), "LOCK_PATH": place.lock_path,
                       "MUTEX": place.lock_path + ".mutex", "MUTEX_WAIT": MUTEX_WAIT,
                       "WANT": id_prefix(lock_id), "UNSAFE": UNSAFE,
                       "WAIT_TIMEOUT": WAIT_TIMEOUT, **values})
    return (block + load("planner.facts", "guard.sh") + load("executor", "flock.sh")
            + load("executor", "lock.sh") + load("executor", part))


def acquire_script(lock_id: str, stale_after: float, place: Place = HOST) -> str:
    """Prints `ours`, `new`, or `held`/`stale` followed by a LOCK-fact listing of the
    existing lock; creates or replaces the lock (content from stdin) unless `held`: held
    while its age (host clock, whole seconds) is at most `stale_after`
    (executor/sh/lock_acquire.sh)."""
    return _script_for(lock_id, "lock_acquire.sh",
                       {"STALE_AFTER": stale_seconds(stale_after)}, place)


def parse_acquire(out: str) -> tuple[str, LockState | None]:
    lines = out.splitlines()
    verdict = lines[0] if lines else ""
    if verdict in ("ours", "new"):
        return verdict, None
    if verdict in ("held", "stale"):
        state: LockState = LOCK.parse(Output("\n".join(lines[1:]) + "\n", 0))
        return verdict, state
    raise ValueError(f"unexpected lock script output {out[:80]!r}")


# The lock id this process holds on each host (by its writer): a restart script's GO line
# carries it, and the host stops its engine only while that lock is still there and fresh
# (swap_script.go_line). Weak: a writer's entry goes with the writer.
_held_ids: weakref.WeakKeyDictionary[HostWriter, str] = weakref.WeakKeyDictionary()


def held_lock_id(host: HostWriter) -> str | None:
    """The id of the lock this process took on `host` and has not released, if any."""
    try:
        return _held_ids.get(host)
    except TypeError:  # a stand-in host that cannot be weakly referenced holds no lock
        return None


def _remember(host: HostWriter, lock_id: str) -> None:
    try:
        _held_ids[host] = lock_id
    except TypeError:
        pass  # as above: nothing to remember it by


def acquire(host: HostWriter, info: LockInfo, stale_after: float = STALE_AFTER,
            config_file: str = "cluster.yaml") -> str | None:
    """Create the lock, or take over one untouched for more than `stale_after` seconds.

    Returns the id of the stale lock taken over (None if there was none, or if the lock
    already was ours, e.g. after a retried round trip); raises LockHeld when another run
    holds it.
    """
    result = _run(host, acquire_script(info.id, stale_after), stdin=info.to_json().encode())
    verdict, state = _parse_result(host.label, result.stdout)
    if verdict == "held":
        assert state is not None
        raise LockHeld(host.label, state, config_file)
    _remember(host, info.id)
    if verdict == "stale":
        assert state is not None
        old = (state.holder or {}).get("id")
        log.debug("%s: took over stale lock %s", host.label, state.describe())
        return str(old) if old else "unknown"
    log.debug("%s: lock %s %s", host.label, info.id,
              "already ours" if verdict == "ours" else "created")
    return None


def _run(host: HostWriter, script: str, *, stdin: bytes | None = None,
         timeout: float | None = None) -> CommandResult:
    """Run a lock script; a host whose lock directory is not root's alone, or whose mutex
    stayed taken, fails with the script's own one line (naming the host and the path)."""
    result = host.run_root(script, stdin=stdin, timeout=timeout, check=False)
    if result.exit_code == 0:
        return result
    said = result.stderr.decode("utf-8", "replace").strip().splitlines()[:1]
    if result.exit_code in (UNSAFE, WAIT_TIMEOUT) and said:
        raise CommandError(host.label, said[0][:300])
    raise CommandError(host.label, f"remote command failed (exit {result.exit_code}): "
                                   f"{said[0][:300] if said else 'no message'}")


def _parse_result(label: str, stdout: bytes) -> tuple[str, LockState | None]:
    try:
        return parse_acquire(stdout.decode("utf-8", "replace"))
    except ValueError as exc:
        raise CommandError(label, f"cannot read the lock: {exc}") from None


def _if_ours(lock_id: str, action: str) -> str:
    """`yes` after `action` (touch, remove) if the lock is still `lock_id`'s, else `no`."""
    return _script_for(lock_id, "lock_if_ours.sh", {"ACTION": action})


def _yes(host: HostWriter, script: str, timeout: float | None = None) -> bool:
    answer = _run(host, script, timeout=timeout).stdout.decode("utf-8", "replace").strip()
    if answer not in ("yes", "no"):
        raise CommandError(host.label, f"unexpected lock script output {answer[:80]!r}")
    return answer == "yes"


def touch(host: HostWriter, info: LockInfo, timeout: float | None = None) -> bool:
    """Refresh the lock's mtime if it is still ours; False if another run took it over.
    `timeout` bounds the round trip (CommandTimeout after it)."""
    return _yes(host, _if_ours(info.id, "touch"), timeout)


def release(host: HostWriter, info: LockInfo) -> bool:
    """Remove the lock if it is still ours; False if it is gone or someone else's."""
    _forget(host, info.id)
    return _yes(host, _if_ours(info.id, "remove"))


def force_unlock(host: HostWriter, lock_id: str) -> bool:
    """Remove the lock of a crashed run, only if its id is `lock_id`."""
    _forget(host, lock_id)
    return _yes(host, _if_ours(lock_id, "remove"))


def _forget(host: HostWriter, lock_id: str) -> None:
    """Before the removal, not after: a restart let go from now on must not count on it."""
    if held_lock_id(host) == lock_id:
        _held_ids.pop(host, None)


class LockSet:
    """Locks many hosts: in a fixed order (sorted by host label) so two runs can't deadlock
    each other; if any host fails, releases the ones already taken and re-raises; a
    background thread touches every lock every `touch_every` seconds until release_all();
    with wait_timeout > 0, a held lock is retried every `poll` seconds until the timeout,
    then LockHeld.

    The toucher shares each host's SSH session with the phases: every command runs on its
    own SSH channel, and a session runs several at once (planner/hosts/wire.py). It
    touches all hosts at once, each in its own thread and bounded by `touch_deadline` (a
    quarter of the stale window by default): one hung host can delay nobody else's touch,
    and a host whose last touch is still out gets no second one on top.
    """

    def __init__(self, hosts: Sequence[HostWriter], info: LockInfo, *,
                 wait_timeout: float = 0.0, touch_every: float = TOUCH_EVERY,
                 poll: float = 1.0, touch_deadline: float | None = None,
                 config_file: str = "cluster.yaml",
                 on_wait: Callable[[LockHeld, float], None] | None = None) -> None:
        """`config_file`: what the force-unlock hint names; `on_wait(held, seconds_left)`
        is called at every poll while waiting for another run's lock."""
        self._config_file = config_file
        self._on_wait = on_wait
        self._hosts = sorted(hosts, key=lambda h: h.label)
        self.info = info
        self._wait_timeout = wait_timeout
        self._touch_every = touch_every
        self._touch_deadline = touch_deadline if touch_deadline is not None else \
            STALE_AFTER / 4
        self._in_flight: dict[str, threading.Thread] = {}
        self._poll = poll
        self._held: list[HostWriter] = []
        self._stop = threading.Event()
        self._toucher: threading.Thread | None = None
        self._lost: set[str] = set()
        self._lost_guard = threading.Lock()
        self.notes: list[str] = []

    def acquire_all(self) -> list[str]:
        deadline = time.monotonic() + self._wait_timeout
        taken_over: dict[str, list[str]] = {}
        try:
            for host in self._hosts:
                old = self._acquire_one(host, deadline)
                self._held.append(host)
                if old is not None:
                    taken_over.setdefault(old, []).append(host.label)
        except BaseException:
            # Including KeyboardInterrupt: never leave a partial set of locks behind.
            self.release_all()
            raise
        self._stop.clear()
        self._toucher = start(self._touch_loop, name="cargoship-lock-toucher")
        # One note per stale lock (a crashed run locked every host with one id), not per host.
        self.notes = [f"took over stale lock {old} on {len(labels)} host(s): "
                      f"{', '.join(labels)}" for old, labels in taken_over.items()]
        return self.notes

    def _acquire_one(self, host: HostWriter, deadline: float) -> str | None:
        while True:
            try:
                return acquire(host, self.info, config_file=self._config_file)
            except LockHeld as held:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise
                log.debug("%s; waiting up to %.0fs more", held, remaining)
                if self._on_wait is not None:
                    self._on_wait(held, remaining)
                time.sleep(min(self._poll, remaining))

    def lost(self) -> set[str]:
        """Labels of hosts whose lock another run took over while we held it."""
        with self._lost_guard:
            return set(self._lost)

    def _touch_loop(self) -> None:
        while not self._stop.wait(self._touch_every):
            self._touch_round()

    def _touch_round(self) -> None:
        for host in list(self._held):
            previous = self._in_flight.get(host.label)
            if previous is not None and previous.is_alive():
                log.warning("%s: the previous lock touch has not answered yet", host.label)
                continue
            self._in_flight[host.label] = start(self._touch_one, args=(host,),
                                                name=f"cargoship-lock-touch-{host.label}")

    def _touch_one(self, host: HostWriter) -> None:
        try:
            if not touch(host, self.info, timeout=self._touch_deadline):
                log.error("%s: lock %s was taken over by another run", host.label,
                          self.info.id)
                with self._lost_guard:
                    self._lost.add(host.label)
        except CargoshipError as exc:
            # A missed touch is not fatal yet: the lock goes stale only after STALE_AFTER.
            log.warning("%s: could not touch lock: %s", host.label, exc)

    def release_all(self) -> None:
        self._stop.set()
        if self._toucher is not None:
            self._toucher.join()
            self._toucher = None
        end = time.monotonic() + self._touch_deadline
        for thread in self._in_flight.values():  # a touch never outlives the release
            thread.join(max(0.0, end - time.monotonic()))
        self._in_flight.clear()
        held, self._held = self._held, []
        for host in held:
            self._release_one(host)

    def _release_one(self, host: HostWriter) -> None:
        try:
            if not release(host, self.info):
                log.warning("%s: lock %s was no longer ours at release", host.label,
                            self.info.id)
        except Exception as exc:  # noqa: BLE001 - one host's failure must not skip the rest
            log.error("%s: could not release lock %s: %s", host.label, self.info.id, exc)

    def __enter__(self) -> LockSet:
        self.acquire_all()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release_all()


__all__ = ["BOUNDED_FLOCK", "LOCK_DIR", "MUTEX_PATH", "MUTEX_WAIT", "UNSAFE", "WAIT_TIMEOUT",
           "LockHeld", "LockInfo", "LockSet", "acquire", "acquire_script", "check_lock_id",
           "force_unlock", "held_lock_id", "id_prefix", "new_lock_info",
           "parse_acquire", "release", "stale_seconds", "touch"]
