"""The shell parts of root-only locks, run with sh on temp directories (tests/e2e/
test_root_only_locks.py runs them on lab hosts through the command): the directory guard,
the bounded flock, the host lock check a GO line's id is held to, and the watcher that
turns the end of a restart script's input into "stop nothing"."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from executor.cleanup import temp_cleanup_script
from executor.host_lock import (
    BOUNDED_FLOCK,
    UNSAFE,
    LockInfo,
    acquire,
    acquire_script,
    force_unlock,
    held_lock_id,
    release,
    touch,
)
from executor.inprogress import mark_script
from executor.swap_runner import Gate
from executor.swap_script import GONE, HELD_GO, SwapScript, go_line
from executor.swap_steps import write_step
from planner.errors import CargoshipError, CommandError
from planner.facts.lock_holder import GUARD, LOCK, LOCK_PATH, STALE_AFTER
from planner.hosts.batch import FactParseError, Output

PLAN = "0123456789abcdef0123456789abcdef"
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")


def sh(script: str, *, stdin: str = "", timeout: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", script], input=stdin, capture_output=True, text=True,
                          timeout=timeout, check=False)


def guard(directory: Path, mode: str, kind: str = "f") -> subprocess.CompletedProcess[str]:
    """cs_dir on `directory`: prints `ok`, or `refused: <why>`."""
    return sh(GUARD + f"if cs_dir '{directory}' {mode} {kind}; then echo ok; "
                      'else echo "refused: $why"; fi')


def stat(path: Path) -> str:
    return f"{path.stat().st_mode & 0o7777:o} {path.stat().st_uid}"


def counted_stat(tmp_path: Path) -> tuple[Path, Path]:
    """A directory to put first on PATH whose `stat` is the real one, and the file it
    adds a line to at each start."""
    log = tmp_path / "stats"
    stub = tmp_path / "bin"
    stub.mkdir()
    real = shutil.which("stat")
    (stub / "stat").write_text(f'#!/bin/sh\necho x >> {log}\nexec {real} "$@"\n')
    (stub / "stat").chmod(0o755)
    return stub, log


@pytest.fixture
def parent(tmp_path: Path) -> Path:
    """A parent as /run is: its owner's alone."""
    (tmp_path / "run").mkdir(mode=0o755)
    return tmp_path / "run"


@root_only
def test_an_absent_directory_is_created_root_only_by_fix_and_left_absent_by_check(
        parent: Path) -> None:
    assert guard(parent / "cargoship", "check").stdout == "ok\n"
    assert not (parent / "cargoship").exists()
    assert guard(parent / "cargoship", "fix").stdout == "ok\n"
    assert stat(parent / "cargoship") == "700 0"


@root_only
def test_a_root_directory_others_can_only_read_is_tightened_by_fix_only(parent: Path) -> None:
    d = parent / "cargoship"
    d.mkdir(mode=0o755)
    d.chmod(0o755)  # as an earlier cargoship made it, whatever the umask
    for name in ("lock", "swap.lock"):
        (d / name).write_text("x")
        (d / name).chmod(0o644)
    assert guard(d, "check").stdout == "ok\n"  # a plan changes nothing
    assert stat(d) == "755 0" and stat(d / "lock") == "644 0"
    assert guard(d, "fix").stdout == "ok\n"
    assert stat(d) == "700 0"
    assert stat(d / "lock") == "600 0" and stat(d / "swap.lock") == "600 0"


@root_only
@pytest.mark.parametrize("mode", ["check", "fix"])
@pytest.mark.parametrize(("make", "said"), [
    ("chown 65534 D", "D is owned by uid 65534: refusing to use it"),
    ("chmod 0777 D", "D is mode 0777 (writable by others): refusing to use it"),
    ("chmod 0775 D", "D is mode 0775 (writable by others): refusing to use it"),
    ("rmdir D && mkdir D.real && ln -s D.real D", "D is a symbolic link: refusing to use it"),
    ("rmdir D && touch D", "D is not a directory: refusing to use it"),
    ("touch D/swap.lock && chown 65534 D/swap.lock",
     "D/swap.lock is owned by uid 65534: refusing to use D"),
    ("touch D/lock && chmod 0666 D/lock", "D/lock is mode 0666 (writable by others)"),
    ("ln -s /etc/shadow D/swap.lock", "D/swap.lock is a symbolic link: refusing to use D"),
    ("mkfifo D/swap.lock", "D/swap.lock is not a regular file: refusing to use D"),
    ("mkdir D/sub", "D/sub is not a regular file: refusing to use D"),
    ("touch D/.hidden && chown 65534 D/.hidden", "D/.hidden is owned by uid 65534"),
    ("chmod 0777 P", "P is mode 0777 (writable by others): refusing to use D"),
])
def test_anything_not_roots_alone_is_refused_and_left_as_it_was(
        parent: Path, mode: str, make: str, said: str) -> None:
    d = parent / "cargoship"
    d.mkdir(mode=0o700)

    def named(text: str) -> str:
        # One pass over standalone D and P: replaced one after the other, a P in the
        # temporary directory's random name (cargoship-test.U8Pm3P) was replaced too.
        return re.sub(r"\b[DP]\b", lambda m: str(d if m.group() == "D" else parent), text)

    assert sh(named(make)).returncode == 0
    before = sh(f"ls -laR {parent}").stdout
    result = guard(d, mode)
    assert result.stdout.startswith("refused: " + named(said)), result.stdout
    assert result.stdout.count("\n") == 1  # one line
    assert sh(f"ls -laR {parent}").stdout == before  # nothing changed, even by fix


@root_only
def test_runs_racing_to_create_the_directory_all_go_on(parent: Path) -> None:
    """Two applies' first lock scripts on a fresh host: one mkdir loses, and goes on."""
    d = parent / "cargoship"
    script = GUARD + f"if cs_dir '{d}' fix f; then echo ok; else echo \"$why\"; fi"
    runs = [subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, text=True)
            for _ in range(12)]
    assert {run.communicate(timeout=20)[0] for run in runs} == {"ok\n"}
    assert stat(d) == "700 0"


@root_only
def test_a_state_directory_may_hold_directories(parent: Path) -> None:
    d = parent / "cargoship"
    (d / "applied").mkdir(parents=True)
    (d / "backups").mkdir(mode=0o700)
    d.chmod(0o755)
    assert guard(d, "fix", "fd").stdout == "ok\n"
    assert stat(d) == "700 0" and stat(d / "applied") == "755 0"  # only the directory


def test_a_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    """Whoever runs the tests: not root, or root on a directory given away."""
    d = tmp_path / "cargoship"
    d.mkdir(mode=0o700)
    if os.geteuid() == 0:
        os.chown(d, 1000, 1000)
    uid = d.stat().st_uid
    assert guard(d, "fix").stdout.startswith(f"refused: {d} is owned by uid {uid}")


def hold(path: Path, shared: bool = False) -> tuple[threading.Event, threading.Thread]:
    """Hold an flock on `path` from this process until the event is set."""
    taken, done = threading.Event(), threading.Event()

    def run() -> None:
        with open(path, "rb") as f:
            fcntl.flock(f, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
            taken.set()
            done.wait(30)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert taken.wait(10)
    return done, thread


def test_a_bounded_flock_gives_up_after_its_seconds(tmp_path: Path) -> None:
    lock = tmp_path / "swap.lock"
    lock.touch()
    take = BOUNDED_FLOCK + f"exec 9<'{lock}'\ncs_flock -x 9 1; echo $?\n"
    started = time.monotonic()
    assert sh(take).stdout == "0\n" and time.monotonic() - started < 1  # free: at once
    done, thread = hold(lock)
    try:
        started = time.monotonic()
        assert sh(take).stdout == "1\n"
        assert 0.9 <= time.monotonic() - started < 5  # given up, about when it should
        shared = BOUNDED_FLOCK + f"exec 9<'{lock}'\ncs_flock -s 9 1; echo $?\n"
        assert sh(shared).stdout == "1\n"
    finally:
        done.set()
        thread.join(10)
    assert sh(take).stdout == "0\n"


def script_part(script: str, first: str, last: str = "\n}\n") -> str:
    """The text of one shell function (or line block) of a generated script."""
    start = script.index(first)
    return script[start:script.index(last, start) + len(last)]


def held_check(lock: Path) -> str:
    """The swap script's `held`, reading `lock` in place of the host lock."""
    head = SwapScript.of("runit", "rke2-agent", False, [], stop_timeout=10,
                         watch_seconds=20).head()
    assert f"\nLOCK_PATH={LOCK_PATH}\n" in head
    return f"LOCK_PATH='{lock}'\nSTALE_AFTER={STALE_AFTER}\n" + script_part(head, "held() {")


def test_the_go_line_carries_the_lock_id_the_host_checks(tmp_path: Path) -> None:
    assert go_line("00ab12") == "go 00ab12\n" and go_line(None) == HELD_GO == "go -\n"
    with pytest.raises(CargoshipError, match="not a lock id"):
        go_line("ab; sv down x")
    lock = tmp_path / "lock"
    check = held_check(lock) + 'if held "$1"; then echo held; else echo "$why"; fi'

    def verdict(lock_id: str) -> str:
        return subprocess.run(["sh", "-c", check, "sh", lock_id], capture_output=True,
                              text=True, check=True).stdout.strip()

    assert verdict("-") == "held"  # a caller that holds no lock (tests) checks none
    assert verdict("00ab12") == f"{lock} no longer holds lock 00ab12 (taken over or removed)"
    lock.write_text(LockInfo("00ab12", "u@m", 1, None, "x").to_json())
    assert verdict("00ab12") == "held"
    assert verdict("00ab1").startswith(f"{lock} no longer holds lock 00ab1 ")  # a prefix
    assert verdict("ffff").startswith(f"{lock} no longer holds lock ffff ")
    stale = time.time() - STALE_AFTER - 5
    os.utime(lock, (stale, stale))
    assert re.fullmatch(rf"lock 00ab12 in {lock} was last touched 6\d s ago \(its apply is "
                        r"gone or stuck\)", verdict("00ab12"))


def watched(case: str, tmp_path: Path) -> tuple[int, str, str]:
    """A restart script's head, GO and input watcher, with a stand-in `swap` (waits for
    a flag file, then checks as the real one does right before its stop) and `unstage`.
    `case`: when its input ends."""
    head = SwapScript.of("runit", "rke2-agent", False, [], stop_timeout=10,
                         watch_seconds=20).head()
    flag = tmp_path / f"flag-{case}"
    stand_in = f"""
say() {{ printf '%s\\n' "$*" 2>/dev/null; }}
watch() {{ echo watched; }}
unstage() {{ echo unstaged >&2; }}
trap unstage EXIT
swap() {{
  trap '' HUP PIPE
  trap 'exit {GONE}' INT TERM USR1
  trap 'unwatch; unstage' EXIT
  i=0; while [ $i -lt 200 ] && [ ! -e '{flag}' ]; do sleep 0.05; i=$((i + 1)); done
  unwatch || exit {GONE}
  trap - EXIT
  echo "stopped for $1"
}}
"""
    script = (f"GONE={GONE}\nINPUT_ENDED=3\n" + script_part(head, "w=\nunwatch()", "; }\n")
              + script_part(head, "\ngo() {") + stand_in)
    proc = subprocess.Popen(["sh", "-s"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write(script.encode())
    proc.stdin.flush()
    started = time.monotonic()
    if case != "before go":
        proc.stdin.write(go_line("00ab12").encode())
        proc.stdin.flush()
        time.sleep(0.3)
        if case == "alive":
            flag.touch()
            time.sleep(0.3)
            proc.stdin.write(b"echo read on\n")
            proc.stdin.flush()
    proc.stdin.close()  # the end of its input: what a killed apply's closed channel is
    out, err = proc.stdout.read().decode(), proc.stderr.read().decode()
    code = proc.wait(10)
    assert time.monotonic() - started < 5  # never the stand-in's own 10 s
    return code, out, err


def test_the_end_of_input_before_the_stop_stops_nothing(tmp_path: Path) -> None:
    # Before GO: the shell reads its input itself; its end ends the shell.
    assert watched("before go", tmp_path) == (0, "", "unstaged\n")
    # After GO, while the swap waits: the watcher sees it and the swap gives up at once.
    assert watched("after go", tmp_path) == (GONE, "", "unstaged\n")
    # Input open until the swap passed its checks: it stops (here: says so), then the
    # shell reads on, as it does for `finish`, and no stray message is left on stderr.
    assert watched("alive", tmp_path) == (0, "stopped for 00ab12\nwatched\nread on\n", "")


def test_a_write_that_fails_before_go_ends_the_script_removing_what_it_staged(
        tmp_path: Path) -> None:
    """A client killed while the `before` probe runs: the probe's line is written to a
    closed channel. SIGPIPE must end the script through its EXIT trap (unstage), not
    kill it outright, leaving the staged file (with its secrets) behind."""
    head = SwapScript.of("runit", "rke2-agent", False,
                         [write_step("/etc/x.yaml", b"a: 1\n", mode=0o600, plan_id=PLAN)],
                         stop_timeout=10, watch_seconds=20).head()
    found = re.search(r"^ *(trap 'exit \"\$UNPREPARED\"' HUP INT TERM PIPE)$", head, re.M)
    assert found and "\nUNPREPARED=6\n" in head
    staged = tmp_path / ".cargoship.XXXXXX"
    staged.write_text("secret")
    script = ("T=t\nUNPREPARED=6\nSTEPS=1\n" + script_part(head, "say() {", "\n")
              + f"s0='{staged}'\n" + script_part(head, "unstage() {")
              + "trap unstage EXIT\n" + found.group(1)
              + "\nsleep 0.3\nsay \"$T before\"\necho not reached >&2\n")
    proc = subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the channel is gone
    assert proc.wait(10) == 6
    assert proc.stderr.read() == b""
    assert not staged.exists()


def test_every_host_wait_is_bounded_and_every_lock_file_opened_read_only() -> None:
    swap = SwapScript.of("systemd", "rke2-server", True,
                         [write_step("/etc/x.yaml", b"a: 1\n", mode=0o600, plan_id=PLAN)],
                         stop_timeout=10, watch_seconds=20)
    scripts = {"acquire": acquire_script("abc", 60), "cleanup": temp_cleanup_script("rke2"),
               "swap": swap.head(), "mark": mark_script(PLAN)}
    for name, text in scripts.items():
        assert subprocess.run(["sh", "-n"], input=text.encode(), check=False).returncode == 0
        # flock only ever tries (-n) or lets go (-u): cs_flock is the one wait, bounded.
        for call in re.findall(r"\bflock( [^;\n|&)]*)", text):
            assert re.match(r" (-n|-u) ", call), (name, call)
        assert not re.search(r"exec 9>", text), name  # opened read-only: exec 9<
        assert "umask 022" not in text and "0644" not in text and "0755" not in text, name
    assert 'cs_flock -x 9 "$SWAP_LOCK_WAIT"' in swap.head()
    assert "\nSWAP_LOCK_WAIT=40\n" in swap.head()  # stop_timeout + 30
    # the keepalive, bounded
    assert re.search(r'while \[ \$i -lt "\$ALIVE_FOR" \] && sleep 1', swap.head())
    assert re.search(r"\nALIVE_FOR=\d+\n", swap.head())


class Host:
    """Answers lock scripts as a host would, as far as these tests look."""

    label = "wrk-1 (10.0.0.21)"

    def __init__(self, exit_code: int = 0, stderr: bytes = b"") -> None:
        self.exit_code, self.stderr = exit_code, stderr

    def run_root(self, script: str, **_: Any) -> Any:
        out = b"new\n" if "echo new" in script else b"yes\n"
        return SimpleNamespace(stdout=out if self.exit_code == 0 else b"",
                               stderr=self.stderr, exit_code=self.exit_code)


def test_the_lock_this_run_holds_is_remembered_for_the_go_line() -> None:
    host = Host()
    info = LockInfo("00ab12", "u@m", 1, None, "x")
    assert held_lock_id(host) is None  # type: ignore[arg-type]
    acquire(host, info)  # type: ignore[arg-type]
    assert held_lock_id(host) == "00ab12"  # type: ignore[arg-type]
    assert touch(host, info)  # type: ignore[arg-type]
    assert held_lock_id(host) == "00ab12"  # type: ignore[arg-type]
    assert force_unlock(host, "ffff")  # type: ignore[arg-type]  # not ours: kept
    assert held_lock_id(host) == "00ab12"  # type: ignore[arg-type]
    release(host, info)  # type: ignore[arg-type]
    assert held_lock_id(host) is None  # type: ignore[arg-type]
    gate = Gate()
    gate.begin("begin\n")
    gate.open(go_line("00ab12"))
    assert [gate.next(0), gate.next(1)] == ["begin\n", "go 00ab12\n"]


def test_an_unsafe_host_fails_with_its_own_line() -> None:
    said = b"/run/cargoship is owned by uid 1000: refusing to use it; nothing was changed\n"
    with pytest.raises(CommandError) as caught:
        acquire(Host(UNSAFE, said), LockInfo("00ab12", "u@m", 1, None, "x"))  # type: ignore[arg-type]
    assert str(caught.value) == ("wrk-1 (10.0.0.21): /run/cargoship is owned by uid 1000: "
                                 "refusing to use it; nothing was changed")
    with pytest.raises(CommandError, match=r"remote command failed \(exit 2\): boom"):
        acquire(Host(2, b"boom\n"), LockInfo("00ab12", "u@m", 1, None, "x"))  # type: ignore[arg-type]


def test_a_plan_reports_an_unsafe_lock_directory_as_a_problem() -> None:
    with pytest.raises(FactParseError, match=r"^/run/cargoship is owned by uid 1000: refusing"):
        LOCK.parse(Output("unsafe /run/cargoship is owned by uid 1000: refusing to use it\n", 0))
    assert LOCK.parse(Output("none\n", 0)).holder is None


@root_only
@pytest.mark.parametrize("bad", ["a-first", "m-middle", "z-last"])
def test_among_many_entries_the_one_that_is_not_roots_alone_is_named(
        parent: Path, bad: str) -> None:
    """One stat answers for the parent, the directory and every entry, a line each in
    order: each line must be judged against its own entry."""
    d = parent / "cargoship"
    d.mkdir(mode=0o700)
    for name in ("a-first", "b", "c", "m-middle", "x", "y", "z-last"):
        (d / name).write_text("x")
        (d / name).chmod(0o600)
    (d / bad).chmod(0o666)
    assert guard(d, "check").stdout == f"refused: {d}/{bad} is mode 0666 (writable by others)" \
        f": refusing to use {d}\n"
    (d / bad).chmod(0o600)
    assert guard(d, "check").stdout == "ok\n"


@root_only
def test_a_directory_and_its_entries_cost_one_stat(parent: Path, tmp_path: Path) -> None:
    """A plan on every host checks the lock and state directories: one `stat` program for
    a directory however many entries it holds, not one each."""
    d = parent / "cargoship"
    d.mkdir(mode=0o700)
    for i in range(20):
        (d / f"f{i}").write_text("x")
    stub, log = counted_stat(tmp_path)
    result = sh(f"PATH={stub}:$PATH\n" + GUARD + f"if cs_dir '{d}' check f; then echo ok; fi")
    assert result.stdout == "ok\n", result.stderr
    assert log.read_text().count("x") == 1


@root_only
def test_neither_directory_there_costs_one_stat_for_both_parents(tmp_path: Path) -> None:
    """A plan of a host cargoship has not changed yet: the lock and state directories are
    absent, and their parents (all a check reads then) cost one `stat` together. An unsafe
    parent is still named, whichever of the two it is."""
    run_dir, lib_dir = tmp_path / "run", tmp_path / "lib"
    run_dir.mkdir(mode=0o755)
    lib_dir.mkdir(mode=0o755)
    stub, log = counted_stat(tmp_path)
    script = (f"PATH={stub}:$PATH\nLOCK_DIR='{run_dir}/cargoship'\n"
              f"STATE_DIR='{lib_dir}/cargoship'\n" + GUARD +
              'if cs_guard check; then echo ok; else echo "refused: $why"; fi')
    assert sh(script).stdout == "ok\n"
    assert log.read_text().count("x") == 1
    lib_dir.chmod(0o777)
    assert sh(script).stdout == (f"refused: {lib_dir} is mode 0777 (writable by others): "
                                 f"refusing to use {lib_dir}/cargoship\n")
    lib_dir.chmod(0o755)
    run_dir.chmod(0o775)
    assert sh(script).stdout == (f"refused: {run_dir} is mode 0775 (writable by others): "
                                 f"refusing to use {run_dir}/cargoship\n")
