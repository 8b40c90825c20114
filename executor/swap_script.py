"""The one remote script of an engine restart: stop, change the files, start, then watch
the engine on the host, reporting as it goes.

A restart used to cost a round trip per step and more per poll (stop, wait for stopped,
each file, start, the engine's state every fraction of a second while it came back). Here
the host does all of it in one exec, waiting locally for each service state (bounded), and
streams one line per event, so the executor hears of each step as it happens:

    <token> staged                      the new content is staged
    <token> marked                      the in-progress marker is set (if it was given)
    <token> before ... <token> end      the engine before anything happens to it
    <token> starting | state            a probe of the engine (readiness.probe_script;
                                        `starting`, right before the start: controllers),
    ...                                 its lines, then `<token> end`
    <token> stopped <unix seconds>      the engine is down; the host's clock then
    <token> done <index> <result>       a file step finished (`backup`, `new`, a count)
    <token> started                     the start was asked for
    <token> cleared <exit code>         the command sent last (`finish`) ended
    <token> alive                       nothing changed for a second (the client is there)
    <token> go                          right before the stop: a write that a closed
                                        channel makes fail (no event: OutputReader skips it)
    <token> deadline                    the watch ran out of time

After `started` the script keeps probing the engine (every 0.1 s until it runs, then every
0.5 s) and prints a probe only when it changed, until its deadline or until the executor
stops reading (its next line then fails to write, and it exits). It asks for the start
again when the service stays plainly down for two seconds (runit can drop an `sv up` that
arrives during its restart back-off).

A script whose cargoship is gone does nothing: it stops the engine only while its apply
is alive and holds the host lock. Right before the stop (the point of no return) it checks
that the host lock (planner.facts.lock.LOCK_PATH) still holds the lock id its GO line
carries and was touched within STALE_AFTER (the lock keeper touches it every 30 s), that a
line to the executor still writes (stdout: the SSH channel is open), and that its input
has not ended (stdin: a killed apply's connection closes, and a watcher reading the input
since GO sees its end and signals the script at once, even in the middle of a wait).
Failing any, it removes what it staged and exits, nothing stopped. Past that point,
hang-ups and broken pipes are ignored: a client that dies mid-way leaves the engine
started on whatever files were written, never stopped for good, and the in-progress
marker tells the next plan to recover the host.

From before the stop until the start is asked for, the script holds an exclusive flock on
planner.facts.lock.SWAP_LOCK_PATH, which a plan's snapshot waits for: a plan made while a
dead client's script is still finishing its change reads the files once it is done. The
lock file is root's alone (its directory checked first: planner.facts.lock.GUARD), opened
read-only, and the wait for it is bounded (swap_lock_wait): no local user can hold it, and
whoever else does cannot hold a restart forever.

File content travels inside the script, which goes to `sh -s` on stdin (never a command
line), as base64 here-documents. The token is random per script, so no probe output can
forge a line.

The script comes in four parts, each run as soon as the host reads it (restart.Gate
holds back the later ones). The head defines everything and stages each new file
(files.stage_script: the content in a temp file beside its target, on disk, with its
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

import base64
import re
import secrets
from dataclasses import dataclass

from planner.facts.lock import GUARD, LOCK_DIR, LOCK_PATH, STALE_AFTER, SWAP_LOCK_PATH
from planner.hosts.batch import quote

from .files import (
    Written,
    backup_path,
    commit_script,
    remove_script,
    restore_script,
    restore_tree_script,
    stage_script,
    written,
)
from .lock import BOUNDED_FLOCK, UNSAFE, WAIT_TIMEOUT, check_lock_id
from .readiness import EngineState, parse_probe, probe_script
from .service import runit_dir, start_command, stop_command

_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
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
START_TICK = 0.05
RUN_TICK = 0.5
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
# The watcher of the input exits with this when the input ended.
_INPUT_ENDED = 3
_SWAP_LOCK = quote(SWAP_LOCK_PATH)
_LOCK = quote(LOCK_PATH)


def go_line(lock_id: str | None) -> str:
    """The GO line of a script whose input stays open (restart.Gate): `swap` with the id
    of the host lock the apply holds ("-": none, a caller that holds no lock), then the
    watch in the background while the shell reads on: FINISH, or the end of its input."""
    return f"go {check_lock_id(lock_id) if lock_id is not None else '-'}\n"


HELD_GO = go_line(None)


def finish(command: str) -> str:
    """A held script's last input, once its host is back: `command` (the in-progress
    marker's removal), then `cleared` with its exit code. The watch goes on meanwhile,
    until the executor stops reading."""
    return f'( {command} ) </dev/null; say "$T cleared $?"\n'


@dataclass(frozen=True)
class Step:
    """One change of a file, as a script run in its own subshell (set -eu)."""

    verb: str  # what the progress note says: wrote, removed, restored
    path: str
    script: str  # with `stage`, run with the staged temp file's path in $tmp
    content: bytes | None = None  # the stdin of `stage` if any, else of `script`
    plan_id: str = ""
    # Run long before the stop (before the host's turn, when the script is preloaded);
    # prints the temp file `script` then puts in place.
    stage: str | None = None

    def written(self, result: str) -> Written | None:
        """What a restore needs to undo this step, from the step's result word."""
        if self.verb == "wrote":
            return written(self.path, self.plan_id, result.encode())
        if self.verb == "removed":
            return Written(self.path, backup_path(self.plan_id, self.path))
        return None  # restores are not undone


def write_step(path: str, content: bytes, *, mode: int, plan_id: str) -> Step:
    return Step("wrote", path, commit_script(path, plan_id=plan_id), content, plan_id,
                stage_script(path, mode=mode, plan_id=plan_id, source="base64 -d"))


def remove_step(path: str, *, plan_id: str) -> Step:
    return Step("removed", path, remove_script(path, plan_id=plan_id), plan_id=plan_id)


def restore_step(item: Written) -> Step:
    return Step("restored", item.path, restore_script(item))


def restore_tree_step(backup_dir: str) -> Step:
    return Step("restored", backup_dir, restore_tree_script(backup_dir))


def _look_lines(init: str) -> list[str]:
    """Before the watch: the state of _probe_lines' quick look."""
    return ["key=x; age=0"] if init == "runit" else []


def _probe_lines(init: str) -> list[str]:
    """The watch's look at the engine: the probe at every tick; on runit the probe only when
    supervise/ says something changed, or once a second. That look is shell builtins and
    the service's `check`, where the probe runs `sv` and two subshells more: while a wave
    of engines starts, every program a host runs slows the others sharing its CPUs."""
    if init != "runit":
        return ["  p=$(probe 2>/dev/null)"]
    return [
        "  k=; r=; read -r k 2>/dev/null < \"$sd/supervise/stat\"; "
        "read -r r 2>/dev/null < \"$sd/supervise/pid\"; k=\"$k $r\"",
        '  case "$k" in run*) if [ -x "$sd/check" ] && '
        '(cd "$sd" && ./check) >/dev/null 2>&1; then k="$k ok"; fi;; esac',
        "  age=$((age + tick))",
        '  if [ "$k" != "$key" ] || [ $age -ge 100 ]; then '
        "key=$k; age=0; p=$(probe 2>/dev/null); fi",
    ]


def _stop_probe_lines(init: str) -> list[str]:
    """The stop's look at the engine at each tick. On runit, runsv's supervise/stat (one
    word, `down` once the service's process is gone) is read with a shell builtin, and the
    probe (`sv` and two subshells) runs only once it says anything but `run` or `finish`:
    eight engines stopping together, each host probing every 0.02 s, made each stop's
    end show 0.03-0.18 s late on the lab's shared CPUs. `down` is what `sv status` would
    say too (runsv writes both files at each change), so it needs no probe either. `p`
    stays empty until the service is down or something unexpected needs a probe."""
    if init != "runit":
        return ["  p=$(probe 2>/dev/null)"]
    return ['  k=; read -r k 2>/dev/null < "$sd/supervise/stat"',
            '  case "$k" in down*) p="state runit down: $sd (supervise/stat: $k)";; '
            'run*|finish*) p=;; *) p=$(probe 2>/dev/null);; esac']


def stop_ticks(timeout: float) -> tuple[int, int]:
    """(fast, all): how many looks at a stop are STOP_TICK apart, and how many in all
    until `timeout` seconds (the rest STOP_SLOW_TICK apart)."""
    fast = max(1, min(round(STOP_FAST_FOR / STOP_TICK), round(timeout / STOP_TICK)))
    return fast, fast + max(0, round((timeout - fast * STOP_TICK) / STOP_SLOW_TICK))


def _centi(seconds: float) -> int:
    """Seconds as whole hundredths, at least one (a tick of 0 would spin)."""
    return max(1, round(seconds * 100))


def _stopped_case() -> str:
    """Shell patterns of a probe whose service is down (or gone), for every init system."""
    return ('"state absent"*|"state systemd inactive"*|"state systemd failed"*|'
            '"state runit down:"*|"state runit fail:"*|"state runit warning:"*|'
            '"state openrc "*stopped*|"state openrc "*crashed*')


def _running_case() -> str:
    return '"state systemd active"*|"state runit run:"*|"state openrc "*started*'


def _plainly_down_case() -> str:
    """Down and not coming back by itself (runit says `want up` between restarts)."""
    return '"state systemd inactive"*|"state runit down:"*|"state openrc "*stopped*'


def _content(delimiter: str, content: bytes) -> str:
    return f"<<'{delimiter}'\n" + base64.encodebytes(content).decode() + f"{delimiter}\n"


def _stage_lines(index: int, step: Step, token: str) -> str:
    """Stage the step's new content, its temp file's path kept in s<index>; a failure
    ends the script before anything was stopped or changed (UNPREPARED)."""
    assert step.stage is not None and step.content is not None
    feed = _content(f"CS_{token}_{index}", step.content)
    return f"s{index}=$( ( {step.stage}\n) {feed}) || exit {UNPREPARED}\n"


def _step_lines(index: int, step: Step, token: str) -> str:
    """The step in a subshell, its stdout (`backup`, a count) its result; the content,
    if any, on its stdin from a here-document (or staged before: its temp file in $tmp)."""
    if step.stage is not None:
        run = f"r=$( ( tmp=$s{index}; {step.script}\n) </dev/null)\nrc=$?; s{index}=\n"
    elif step.content is None:
        run = f"r=$( ( {step.script}\n) </dev/null)\nrc=$?\n"
    else:
        feed = _content(f"CS_{token}_{index}", step.content)
        run = f"r=$( ( {step.script}\n) {feed})\nrc=$?\n"
    return (f"{run}if [ $rc -ne 0 ]; then exit $rc; fi\n"
            f"set -- $r; say \"$T done {index} ${{1:-new}}\"\n")


def _open_swap_lock_lines() -> list[str]:
    """As the head runs (before the host's turn when preloaded, so that the checks cost
    the stop nothing): the lock directory checked, changing nothing (a script cancelled
    before GO leaves no trace), the script ending before anything was staged when it is
    not root's alone; the swap lock opened on fd 9 if it is there (after the apply's
    first restart of the host it is). Only GO's `swap` takes it (see `openlock`)."""
    return [
        f"if ! cs_dir {quote(LOCK_DIR)} check f; then "
        f'echo "$why; nothing was stopped" >&2; exit {UNSAFE}; fi',
        f"sl=; if [ -f {_SWAP_LOCK} ]; then exec 9<{_SWAP_LOCK}; sl=1; fi",
    ]


def _openlock_lines() -> list[str]:
    """`openlock`: the swap lock on fd 9 unless the head opened it: the directory checked
    and made root's alone, the file created root's alone if absent, opened read-only (an
    flock needs no more)."""
    return [
        "openlock() {",
        '  [ -z "$sl" ] || return 0',
        f"  if ! cs_dir {quote(LOCK_DIR)} fix f; then "
        f'echo "$why; nothing was stopped" >&2; return {UNSAFE}; fi',
        f"  [ -e {_SWAP_LOCK} ] || ( umask 077; : >>{_SWAP_LOCK} )",
        f"  exec 9<{_SWAP_LOCK}; sl=1",
        "}",
    ]


def _unstage_lines(steps: tuple[Step, ...]) -> list[str]:
    """The staged temp files go with the script, unless put in place (their s<i> then
    empty): a script cancelled before its GO, or failed, leaves none behind."""
    staged = [i for i, step in enumerate(steps) if step.stage is not None]
    if not staged:
        return ["unstage() { :; }"]
    return [" ".join(f"s{i}=;" for i in staged),
            "unstage() { " + " ".join(f'[ -z "$s{i}" ] || rm -f -- "$s{i}";'
                                      for i in staged) + " }"]


@dataclass(frozen=True)
class SwapScript:
    init: str
    service: str
    controller: bool
    steps: tuple[Step, ...]
    stop_timeout: float
    watch_seconds: float
    token: str = ""

    @classmethod
    def of(cls, init: str, service: str, controller: bool, steps: list[Step], *,
           stop_timeout: float, watch_seconds: float) -> SwapScript:
        return cls(init, service, controller, tuple(steps), stop_timeout, watch_seconds,
                   "sw" + secrets.token_hex(10))

    def render(self, *, swap: bool = True) -> str:
        """The whole restart in one go (no marker), or (swap=False) only the watch after
        it."""
        return self.head(swap=swap) + (self.begin() if swap else "") + GO

    def begin(self, mark: str | None = None) -> str:
        """The host's turn: set the marker (`mark`, a shell command) and say so, then
        look at the engine as it is before anything happens to it (`before`: its process,
        restart counts), while the node is cordoned and drained rather than after."""
        lines = [f"( {mark} ) </dev/null || exit {UNPREPARED}"] if mark is not None else []
        return "\n".join([*lines, 'say "$T marked"', "block before"]) + "\n"

    def head(self, *, swap: bool = True) -> str:
        """Definitions (`main` among them), then the staging of the new content: a host
        that has run it has changed nothing a reader of its files sees."""
        lines = [
            f"export LC_ALL=C PATH={_PATH}",
            f"T={self.token}",
            "say() { printf '%s\\n' \"$*\" 2>/dev/null; }",
            f"probe() {{\n{probe_script(self.init, self.service, self.controller)}\n}}",
            'block() { p=$(probe 2>/dev/null); say "$T $1" && say "$p" && say "$T end"; }',
        ]
        if self.init == "runit":
            # runit's service directory, for the quick looks of the stop and the watch:
            # found once, as the head runs (before the host's turn when preloaded).
            lines.append(f"sd={runit_dir(self.service)}")
        if swap:
            # A write that fails before GO (the `before` probe of a client that just died)
            # ends the script as the end of its input does: removing what it staged.
            lines += [*_unstage_lines(self.steps), "trap unstage EXIT",
                      f"trap 'exit {UNPREPARED}' HUP INT TERM PIPE",
                      *self._guard_lines(), *_open_swap_lock_lines()]
            lines += [_stage_lines(i, step, self.token)
                      for i, step in enumerate(self.steps) if step.stage is not None]
            lines.append('say "$T staged"')
        if swap:
            lines += self._swap_lines()
        lines += [
            "watch() {",
            f"end=$(( $(date +%s) + {max(1, round(self.watch_seconds))} ))",
            # Times in hundredths of a second, so the shell's integer arithmetic can count
            # them.
            f"last=; quiet=0; down=0; clock=0; tick={_centi(START_TICK)}",
            *_look_lines(self.init),
            "while :; do",
            *_probe_lines(self.init),
            '  if [ "$p" != "$last" ]; then',
            '    say "$T state" && say "$p" && say "$T end" || exit 0',
            "    last=$p; quiet=0",
            "  fi",
            f'  case "$p" in {_running_case()}) tick={_centi(RUN_TICK)};; esac',
            '  case "$p" in *"want up"*) down=0;; '
            f"{_plainly_down_case()}) down=$((down + tick));; *) down=0;; esac",
            f"  if [ $down -ge {NUDGE_AFTER * 100} ]; then "
            f"{start_command(self.init, self.service)} >/dev/null 2>&1 9>&-; down=0; fi",
            "  quiet=$((quiet + tick))",
            f"  if [ $quiet -ge {ALIVE_EVERY * 100} ]; then say \"$T alive\" || exit 0; "
            "quiet=0; fi",
            # The clock once a second, not at every tick: `date` is a program, and while
            # an engine starts every program the host runs slows it down.
            "  clock=$((clock + tick))",
            '  if [ $clock -ge 100 ]; then clock=0; '
            'if [ "$(date +%s)" -ge "$end" ]; then say "$T deadline"; exit 0; fi; fi',
            '  sleep "$((tick / 100)).$((tick / 10 % 10))$((tick % 10))"',
            "done",
            "}",
            "main() { swap - && watch; }" if swap else "main() { watch; }",
        ]
        if swap:
            lines += self._go_lines()
        return "\n".join(lines) + "\n"

    def _swap_lines(self) -> list[str]:
        """`swap ID`: the checks, then the stop, each file's commit and the start, under
        the swap lock (opened by the head on fd 9)."""
        svc = quote(self.service)
        fast_stop_ticks, stop_ticks_in_all = stop_ticks(self.stop_timeout)
        lines = [
            "swap() {",
            "trap '' HUP PIPE",  # a failed write returns an error: `say` is a check
            # Before the stop, cargoship gone (its input ended: USR1 from the watcher)
            # or told to: give up, removing what was staged (the EXIT trap).
            f"trap 'exit {GONE}' INT TERM USR1",
            # A blocking stop (systemctl waits for the unit, up to its TimeoutStopSec),
            # a slow sync or the swap lock's wait says nothing for a while: something
            # must, or the executor takes the silence for a lost connection. Gone with
            # the script, and bounded all the same.
            f"( i=0; while [ $i -lt {self._alive_for()} ] && sleep 1 >/dev/null; do "
            "say \"$T alive\" || exit 0; i=$((i + 1)); done ) </dev/null 9<&- &",
            "ka=$!",
            "trap 'kill $ka 2>/dev/null; unwatch; unstage' EXIT",
            # Until the start is asked for, the files are changing: a plan's snapshot
            # waits for this lock (the keepalive and the watcher closed fd 9: neither may
            # hold it on). Bounded: past it, a clear error and nothing stopped.
            "openlock || exit $?",
            f"cs_flock -x 9 {self.swap_lock_wait} || {{ echo 'timed out after "
            f"{self.swap_lock_wait} s waiting for {SWAP_LOCK_PATH} (held by another "
            f"process); nothing was stopped' >&2; exit {WAIT_TIMEOUT}; }}",
            f'if ! held "$1"; then echo "$why; nothing was stopped" >&2; exit {NOT_HELD}; fi',
            # The point of no return: only with the channel to cargoship open both ways.
            f'say "$T go" || exit {GONE}',
            f"unwatch || exit {GONE}",
            "trap - INT TERM",
            "trap : USR1",  # nobody sends it now; a command trap is not inherited
            f"e=$({stop_command(self.init, self.service)} 9>&- 2>&1) || "
            f"{{ echo \"stopping {svc} failed: $e\" >&2; exit {STOP_FAILED}; }}",
            "n=0",
            "while :; do",
            *_stop_probe_lines(self.init),
            f"  case \"$p\" in {_stopped_case()}) break;; esac",
            "  n=$((n + 1))",
            f"  if [ $n -ge {stop_ticks_in_all} ]; then",
            "    [ -n \"$p\" ] || p=$(probe 2>/dev/null)",
            f"    echo \"{svc} did not stop within {self.stop_timeout:g} s: "
            "$(echo \"$p\" | head -n 1)\" >&2; exit " f"{STOP_FAILED}",
            "  fi",
            f"  if [ $n -lt {fast_stop_ticks} ]; then sleep {STOP_TICK}; "
            f"else sleep {STOP_SLOW_TICK}; fi",
            "done",
            'say "$T stopped $(date +%s)"',
        ]
        lines += [_step_lines(i, step, self.token) for i, step in enumerate(self.steps)]
        # Right before the start, a controller's API server pod logs are counted again
        # (the old config's pod may have restarted once more while the engine stopped).
        # A worker's probe has nothing the `before` one lacks: no probe, one program
        # less between the last file and the start.
        lines += ["block starting"] if self.controller else []
        lines += [
            # The engine must not inherit the lock (an openrc daemon would hold it on).
            f"e=$({start_command(self.init, self.service)} 9>&- 2>&1) || "
            f"{{ echo \"starting {svc} failed: $e\" >&2; exit {START_FAILED}; }}",
            "flock -u 9 2>/dev/null; exec 9<&-",
            'say "$T started"',
            "kill $ka 2>/dev/null",
            "trap - PIPE EXIT",  # its pid may be another process's by the script's end
            "}",
        ]
        return lines

    @property
    def swap_lock_wait(self) -> int:
        """Seconds the swap lock is waited for before the script gives up, nothing
        stopped: past a killed apply's script finishing its own stop."""
        return max(1, round(self.stop_timeout)) + SWAP_LOCK_SLACK

    def _alive_for(self) -> int:
        """A bound for the keepalive (killed at the start): longer than the executor
        waits for the whole script (restart.RemoteSwap's timeout)."""
        return self.swap_lock_wait + 2 * max(1, round(self.stop_timeout)) + 120

    @staticmethod
    def _guard_lines() -> list[str]:
        """Definitions: the directory guard, `cs_flock`, `openlock`, `held ID` (the host
        lock is still the apply's: its id, touched within STALE_AFTER) and `unwatch`."""
        return [
            GUARD + BOUNDED_FLOCK.rstrip("\n"),
            *_openlock_lines(),
            "held() {",
            '  [ "$1" != - ] || return 0',
            # How a lock file written with that id begins (lock.id_prefix), quoted by hand.
            "  cs_w='{\"id\": \"'\"$1\"'\", '",
            f'  if [ ! -f {_LOCK} ] || [ -L {_LOCK} ] || '
            f'[ "$(head -c ${{#cs_w}} {_LOCK})" != "$cs_w" ]; then',
            f'    why="{LOCK_PATH} no longer holds lock $1 (taken over or removed)"; return 1',
            "  fi",
            f"  cs_a=$(stat -c %Y {_LOCK} 2>/dev/null) || "
            f'{{ why="{LOCK_PATH} is gone (removed)"; return 1; }}',
            '  cs_a=$(( $(date +%s) - cs_a ))',
            f'  [ "$cs_a" -le {STALE_AFTER} ] && return 0',
            f'  why="lock $1 in {LOCK_PATH} was last touched $cs_a s ago (its apply is gone '
            'or stuck)"; return 1',
            "}",
            # True unless the watcher of the input (go) saw it end: killed here, it has
            # read nothing, and once it is reaped no signal of its can come any more.
            "w=",
            'unwatch() { [ -n "$w" ] || return 0; kill "$w" 2>/dev/null; wait "$w" 2>/dev/null; '
            f'cs_r=$?; w=; [ "$cs_r" -ne {_INPUT_ENDED} ]; }}',
        ]

    @staticmethod
    def _go_lines() -> list[str]:
        """`go ID`: from GO on the shell runs `swap`, and does not read its input, so a
        watcher does, on a copy of it (an asynchronous list's input is /dev/null unless
        redirected): its end means cargoship is gone (USR1: swap gives up at once). After
        GO, cargoship sends nothing until the host is back (`finish`), so the watcher
        reads nothing but that end; `swap` kills it before the stop."""
        return [
            "go() {",
            f"trap 'exit {GONE}' USR1",
            "exec 8<&0",
            "( exec 0<&8 8<&- 9<&-; IFS= read -r cs_l || { kill -USR1 $$ 2>/dev/null; "
            f"exit {_INPUT_ENDED}; }} ) &",
            "w=$!",
            "exec 8<&-",
            'swap "$1" </dev/null && { watch </dev/null & }',
            "}",
        ]


# --- what the script says --------------------------------------------------------------

@dataclass(frozen=True)
class Probed:
    name: str  # before, starting, state
    state: EngineState


@dataclass(frozen=True)
class Stopped:
    at: int  # the host's clock, whole seconds, once the engine was down


@dataclass(frozen=True)
class StepDone:
    index: int
    result: str  # backup, new, or a count (restore of a whole backup)


@dataclass(frozen=True)
class Marked:
    pass


@dataclass(frozen=True)
class Staged:
    pass  # the new content is on the host, beside its targets


@dataclass(frozen=True)
class Started:
    pass


@dataclass(frozen=True)
class Cleared:
    exit_code: int  # of the command sent with `finish`


@dataclass(frozen=True)
class Alive:
    pass


@dataclass(frozen=True)
class Deadline:
    pass


Event = Probed | Stopped | StepDone | Marked | Staged | Started | Cleared | Alive | Deadline
_LINE = re.compile(r"(before|starting|state|end|stopped|done|marked|staged|started|"
                   r"cleared|alive|deadline)"
                   r"(?: (\S+))?(?: (\S+))?")


class OutputReader:
    """Turns the script's stdout, fed as it arrives, into events."""

    def __init__(self, token: str) -> None:
        self._prefix = token + " "
        self._pending = b""
        self._block: tuple[str, list[str]] | None = None

    def feed(self, data: bytes) -> list[Event]:
        self._pending += data
        *lines, self._pending = self._pending.split(b"\n")
        events: list[Event] = []
        for raw in lines:
            event = self._line(raw.decode("utf-8", "replace"))
            if event is not None:
                events.append(event)
        return events

    def _line(self, line: str) -> Event | None:
        if not line.startswith(self._prefix):
            if self._block is not None:
                self._block[1].append(line)
            return None  # not the script's own line: nothing a host can forge
        found = _LINE.fullmatch(line[len(self._prefix):])
        if found is None:
            return None
        word, first, second = found.groups()
        if word in ("before", "starting", "state"):
            self._block = (word, [])
        elif word == "end" and self._block is not None:
            name, body = self._block
            self._block = None
            return Probed(name, parse_probe("\n".join(body)))
        elif word == "stopped" and first is not None and first.isdigit():
            return Stopped(int(first))
        elif word == "done" and first is not None and first.isdigit():
            return StepDone(int(first), second or "new")
        elif word == "marked":
            return Marked()
        elif word == "staged":
            return Staged()
        elif word == "started":
            return Started()
        elif word == "cleared" and first is not None and first.isdigit():
            return Cleared(int(first))
        elif word == "alive":
            return Alive()
        elif word == "deadline":
            return Deadline()
        return None
