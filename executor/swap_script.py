"""The one remote script of an engine restart: stop, change the files, start, then watch
the engine on the host, reporting as it goes.

A restart used to cost a round trip per step and more per poll (stop, wait for stopped,
each file, start, the engine's state every fraction of a second while it came back). Here
the host does all of it in one exec, waiting locally for each service state (bounded), and
streams one line per event (swap_output.py lists them and reads them), so the executor
hears of each step as it happens.

After `started` the script keeps probing the engine (every 0.1 s until it runs, then every
0.5 s) and prints a probe only when it changed, until its deadline or until the executor
stops reading (its next line then fails to write, and it exits). It asks for the start
again when the service stays plainly down for two seconds (a start the init system lost).
On runit the stop ends only once runsv has taken it: stopped during runsv's one-second
pause after a crash, an engine reads `down` before runsv has read the request, and the
`sv up` that follows would be skipped (sh/swap.sh, stop_look).

A script whose cargoship is gone does nothing: it stops the engine only while its apply
is alive and holds the host lock. Right before the stop (the point of no return) it checks
that the host lock (planner.facts.lock_holder.LOCK_PATH) still holds the lock id its GO line
carries and was touched within STALE_AFTER (the lock keeper touches it every 30 s), that a
line to the executor still writes (stdout: the SSH channel is open), and that its input
has not ended (stdin: a killed apply's connection closes, and a watcher reading the input
since GO sees its end and signals the script at once, even in the middle of a wait).
Failing any, it removes what it staged and exits, nothing stopped. Past that point,
hang-ups and broken pipes are ignored: a client that dies mid-way leaves the engine
started on whatever files were written, never stopped for good, and the in-progress
marker tells the next plan to recover the host.

From before the stop until the start is asked for, the script holds an exclusive flock on
planner.facts.lock_holder.SWAP_LOCK_PATH, which a plan's snapshot waits for: a plan made while a
dead client's script is still finishing its change reads the files once it is done. The
lock file is root's alone (its directory checked first: planner.facts.lock_holder.GUARD), opened
read-only, and the wait for it is bounded (swap_lock_wait): no local user can hold it, and
whoever else does cannot hold a restart forever.

File content travels inside the script, which goes to `sh -s` on stdin (never a command
line), as base64 in the generated block. The token is random per script, so no probe output can
forge a line.

The shell is executor/sh/swap.sh (after guard.sh, flock.sh and files.sh), shipped as it
is; Python renders only the generated block of variables on top (SwapScript.values).

The script comes in four parts, each run as soon as the host reads it (swap_runner.Gate
holds back the later ones). The head defines everything and stages each new file
(file_writes.stage_script: the content in a temp file beside its target, on disk, with its
mode; the backup directory ready), then says `staged`: sent ahead of the host's turn, it
has the host's sudo, shell and staging done by then. At its turn, `begin` sets the
in-progress marker, says `marked` and probes the engine (`before`). Its GO line
(go_line: `go <lock id>`) runs `swap`: the checks above, the stop, each file's commit (a
backup copy and a rename) and the start; it is sent when the node has drained. The watch
then runs in the background while the shell reads on, and once the host is back and its
node uncordoned, `finish` removes the in-progress marker on the same connection: no
command of its own. A script whose input ends before GO (the shell reads it: the end of
input ends the shell), or ends after GO but before the stop, or that fails before the
stop, or whose writes fail before GO (SIGPIPE), has stopped nothing and changed no file,
and removes what it staged; one whose input ends after the stop finishes the change and
just watches until nobody reads.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from planner.errors import CargoshipError
from planner.facts.distro import LINE_BYTES
from planner.facts.lock_holder import HOST, STALE_AFTER, Place
from planner.hosts.shell import load, variables

from . import file_writes
from .host_lock import UNSAFE, WAIT_TIMEOUT, check_lock_id
from .readiness import APISERVER_LOGS, APISERVER_MANIFEST
from .swap_steps import Step

_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
INITS = ("systemd", "runit", "openrc")


class ServiceError(CargoshipError):
    """The host's init system is none the script knows how to stop and start."""

# The shell, as shipped: the guard's and the bounded flock's functions, the file steps',
# then the restart's own (executor/sh/swap.sh).
_FILES = (("planner.facts", "guard.sh"), ("executor", "flock.sh"), ("executor", "files.sh"),
          ("executor", "swap.sh"))
# The script's last line when its input ends right after it (render): everything before
# it only defines. No lock id and no input to watch: only a caller that holds no host
# lock sends it (tests, and the watch run again after a lost connection).
GO = "main </dev/null\n"
# Seconds between two probes on the host: quick while a stop or a start is awaited (each
# tick of lag is lag of the whole rollout), slow once the engine runs (a crash loop shows
# in new process ids whenever it is looked at).
STOP_TICK = 0.02  # for the first STOP_FAST_FOR seconds, then STOP_SLOW_TICK: a stop that
STOP_FAST_FOR = 0.5  # takes its time (a real engine's can take many seconds) is not looked
STOP_SLOW_TICK = 0.1  # at 50 times a second
START_TICK = 0.05  # the first looks at a start; then a twentieth of the time waited (swap.sh
RUN_TICK = 0.5  # watch), up to RUN_TICK, the pace once the engine runs
ALIVE_EVERY = 1  # seconds: an `alive` line at least this often
NUDGE_AFTER = 2  # seconds plainly down: ask for the start again
STOP_FAILED, START_FAILED = 4, 5
# The script ended before its GO: a file could not be staged or the marker not set.
# Nothing was stopped and no file changed.
UNPREPARED = 6
# Ended before the stop, nothing stopped and no file changed: its apply is gone (the
# input ended, a line to it did not write); the host lock is not that apply's any more
# (taken over, force-unlocked, or not touched within STALE_AFTER). Also UNSAFE (the lock
# directory is not root's alone) and WAIT_TIMEOUT (the swap lock stayed taken).
GONE, NOT_HELD = 7, 8
# Seconds the swap lock is waited for beyond the stop's own timeout: its other holders are
# a plan's snapshot (a moment) and a killed apply's script between its stop and its start.
SWAP_LOCK_SLACK = 30
# Seconds beyond the swap lock's wait and the stop's timeout that a script let go may take
# to start the engine: its checks, each file's commit, the probe before the start.
START_SLACK = 30
# The watcher of the input exits with this when the input ended.
_INPUT_ENDED = 3


@dataclass(frozen=True)
class Timing:
    """How often the script looks and how long it waits, in seconds. On a host always
    TIMING: only the unit tests that run the script with stub init systems
    (tests/unit/test_swap_script_sh.py) ask for shorter ones, so that every wait is over
    in milliseconds."""

    stop_tick: float = STOP_TICK
    stop_fast_for: float = STOP_FAST_FOR
    stop_slow_tick: float = STOP_SLOW_TICK
    start_tick: float = START_TICK
    run_tick: float = RUN_TICK
    alive_every: float = ALIVE_EVERY
    nudge_after: float = NUDGE_AFTER
    clock_every: float = 1.0  # the watch reads the clock (a program) this often
    look_every: float = 1.0  # runit: the probe at least this often, changed or not
    min_watch: int = 1  # the watch's shortest deadline, whole seconds


TIMING = Timing()


@dataclass(frozen=True)
class Where:
    """Where the script finds the init system's services and the tools it runs. On a host
    always THERE; the unit tests put stub `systemctl`, `sv` and `rc-service` first on the
    PATH and the services in a temporary directory."""

    path: str = _PATH
    runit_dirs: tuple[str, ...] = ("/etc/service", "/var/service", "/service")
    initd: str = "/etc/init.d"
    apiserver_logs: str = APISERVER_LOGS
    apiserver_manifest: str = APISERVER_MANIFEST


THERE = Where()


def go_line(lock_id: str | None) -> str:
    """The GO line of a script whose input stays open (swap_runner.Gate): `swap` with the id
    of the host lock the apply holds ("-": none, a caller that holds no lock), then the
    watch in the background while the shell reads on: FINISH, or the end of its input."""
    return f"go {check_lock_id(lock_id) if lock_id is not None else '-'}\n"


HELD_GO = go_line(None)


def finish(command: str) -> str:
    """A held script's last input, once its host is back: `command` (the in-progress
    marker's removal), then `cleared` with its exit code. The watch goes on meanwhile,
    until the executor stops reading."""
    return f"( {command} ) </dev/null; cleared $?\n"


def stop_ticks(timeout: float, timing: Timing = TIMING) -> tuple[int, int]:
    """(fast, all): how many looks at a stop are STOP_TICK apart, and how many in all
    until `timeout` seconds (the rest STOP_SLOW_TICK apart)."""
    fast = max(1, min(round(timing.stop_fast_for / timing.stop_tick),
                      round(timeout / timing.stop_tick)))
    return fast, fast + max(0, round((timeout - fast * timing.stop_tick)
                                     / timing.stop_slow_tick))


def _centi(seconds: float) -> int:
    """Seconds as whole hundredths, at least one (a tick of 0 would spin)."""
    return max(1, round(seconds * 100))


@dataclass(frozen=True)
class SwapScript:
    init: str
    service: str
    controller: bool
    steps: tuple[Step, ...]
    stop_timeout: float
    watch_seconds: float
    token: str = ""
    place: Place = HOST
    timing: Timing = field(default=TIMING)
    where: Where = field(default=THERE)

    @classmethod
    def of(cls, init: str, service: str, controller: bool, steps: list[Step], *,
           stop_timeout: float, watch_seconds: float, place: Place = HOST,
           timing: Timing = TIMING, where: Where = THERE) -> SwapScript:
        if init not in INITS:
            raise ServiceError(f"cannot restart {service}: unsupported init system {init!r}")
        return cls(init, service, controller, tuple(steps), stop_timeout, watch_seconds,
                   "sw" + secrets.token_hex(10), place, timing, where)

    def begin(self, mark: str | None = None) -> str:
        """The host's turn: set the marker (`mark`, a shell command), then `turn`: say so
        and look at the engine as it is before anything happens to it (`before`)."""
        lines = [f"( {mark} ) </dev/null || exit {UNPREPARED}"] if mark is not None else []
        return "\n".join([*lines, "turn"]) + "\n"

    def head(self, *, swap: bool = True) -> str:
        """The generated block, then the shell as shipped: definitions (`main` among
        them), then the staging of the new content: a host that has run it has changed
        nothing a reader of its files sees."""
        return variables(self.values(swap=swap)) + "".join(
            load(package, name) for package, name in _FILES)

    def values(self, *, swap: bool = True) -> dict[str, str | int]:
        """The generated block: every value the script's shell reads (executor/sh/swap.sh
        lists them)."""
        t = self.timing
        fast_stop_ticks, stop_ticks_in_all = stop_ticks(self.stop_timeout, t)
        block: dict[str, str | int] = {
            "T": self.token, "HOST_PATH": self.where.path, "INIT": self.init,
            "SERVICE": self.service, "CONTROLLER": int(self.controller), "SWAP": int(swap),
            "RUNIT_DIRS": " ".join(self.where.runit_dirs), "INITD": self.where.initd,
            "APISERVER_LOGS": self.where.apiserver_logs,
            "APISERVER_MANIFEST": self.where.apiserver_manifest, "LINE_BYTES": LINE_BYTES,
            **self.place.values(), "LOCK_PATH": self.place.lock_path,
            "SWAP_LOCK": f"{self.place.lock_dir}/swap.lock", "STALE_AFTER": STALE_AFTER,
            **file_writes.values(self.place),
            "STOP_TICK": f"{t.stop_tick:g}", "STOP_SLOW_TICK": f"{t.stop_slow_tick:g}",
            "STOP_FAST_TICKS": fast_stop_ticks, "STOP_TICKS": stop_ticks_in_all,
            "STOP_TIMEOUT": f"{self.stop_timeout:g}",
            "START_TICK": _centi(t.start_tick), "RUN_TICK": _centi(t.run_tick),
            "NUDGE_AFTER": _centi(t.nudge_after), "ALIVE_EVERY": _centi(t.alive_every),
            "CLOCK_EVERY": _centi(t.clock_every), "LOOK_EVERY": _centi(t.look_every),
            "WATCH_SECONDS": max(t.min_watch, round(self.watch_seconds)),
            "SWAP_LOCK_WAIT": self.swap_lock_wait, "ALIVE_FOR": self._alive_for(),
            "UNPREPARED": UNPREPARED, "GONE": GONE, "NOT_HELD": NOT_HELD,
            "STOP_FAILED": STOP_FAILED, "START_FAILED": START_FAILED, "UNSAFE": UNSAFE,
            "WAIT_TIMEOUT": WAIT_TIMEOUT, "INPUT_ENDED": _INPUT_ENDED,
            # The watch alone changes no file: no step, no content.
            "STEPS": len(self.steps) if swap else 0,
        }
        for index, step in enumerate(self.steps if swap else ()):
            block.update(step.values(index))
        return block

    @property
    def swap_lock_wait(self) -> int:
        """Seconds the swap lock is waited for before the script gives up, nothing
        stopped: past a killed apply's script finishing its own stop."""
        return max(1, round(self.stop_timeout)) + SWAP_LOCK_SLACK

    @property
    def start_within(self) -> int:
        """Seconds from its GO within which the script starts the engine or ends by its own
        bounds (the swap lock's wait, the stop's timeout, then its file steps): the
        executor waits no longer for `started` (restart_follow.py), however long the
        keepalive says the script is alive."""
        return self.swap_lock_wait + max(1, round(self.stop_timeout)) + START_SLACK

    def _alive_for(self) -> int:
        """A bound for the keepalive (killed at the start): longer than the executor
        waits for the whole script (start_within, and swap_runner.RemoteSwap's
        timeout once its input ended)."""
        return self.swap_lock_wait + 2 * max(1, round(self.stop_timeout)) + 120
