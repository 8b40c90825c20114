"""Run the real `cargoship` command the way a user does, and hold it to the one-line rule.

A command runs as its own process, forked from a process that has imported cargoship
already (tests/e2e/zygote.py: the imports are most of a command's CPU); `exec_=True`, or
CARGOSHIP_TEST_EXEC=1 for every command, starts the installed script instead."""

from __future__ import annotations

import atexit
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml


def cargoship_argv() -> list[str]:
    script = Path(sys.executable).with_name("cargoship")
    if script.exists():
        return [str(script)]
    found = shutil.which("cargoship")
    return [found] if found else [sys.executable, "-m", "cargoship"]


class Zygote:
    """This test process's zygote: started at its first command, gone when this process is
    (it ends when its stdin closes)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._dir = ""
        self._python_env: dict[str, str] = {}  # the PYTHON* variables it started with

    def starts_like(self, env: dict[str, str]) -> bool:
        """Whether a command with `env` would start as the zygote did: the interpreter
        reads PYTHON* variables (PYTHONPATH: a test's plugins) only as it starts."""
        ours = self._python_env if self._process is not None else _python_env(os.environ)
        return _python_env(env) == ours

    def _socket(self) -> str:
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._dir = tempfile.mkdtemp(prefix="cargoship-zygote.")
                path = os.path.join(self._dir, "socket")
                root = Path(__file__).resolve().parents[2]
                self._python_env = _python_env(os.environ)
                self._process = subprocess.Popen(
                    [sys.executable, "-m", "tests.e2e.zygote", path], cwd=root,
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                assert self._process.stdout is not None
                ready = self._process.stdout.readline()
                assert ready == b"ready\n", f"the test zygote did not start: {ready!r}"
                atexit.register(self._stop, self._process, self._dir)
            return os.path.join(self._dir, "socket")

    @staticmethod
    def _stop(process: subprocess.Popen[bytes], folder: str) -> None:
        process.kill()
        process.wait()
        shutil.rmtree(folder, ignore_errors=True)

    def run(self, argv: list[str], env: dict[str, str], timeout: float
            ) -> tuple[subprocess.CompletedProcess[str], str]:
        """The command's result, and what the lab's hosts ran once it had taken
        SLOW_COMMAND seconds ("" if it took less)."""
        path = self._socket()
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
                open(os.devnull, "rb") as nothing, \
                socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn:
            conn.connect(path)
            request = {"argv": argv, "env": env, "cwd": os.getcwd()}
            socket.send_fds(conn, [json.dumps(request).encode()],
                            [nothing.fileno(), out.fileno(), err.fileno()])
            pid = json.loads(conn.recv(4096))["pid"]
            began, slow = time.monotonic(), ""
            while True:
                left = timeout - (time.monotonic() - began)
                conn.settimeout(max(0.0, min(left, SLOW_COMMAND)) if not slow else max(0.0, left))
                try:
                    status = json.loads(conn.recv(4096))["status"]
                    break
                except TimeoutError:
                    if not slow and left > SLOW_COMMAND:
                        slow = hosts_now()  # where a stall is while it lasts
                        continue
                _ask_for_stacks(pid, err)
                hosts = hosts_now()
                os.kill(pid, signal.SIGKILL)
                conn.settimeout(None)
                conn.recv(4096)
                stderr = _text(err)
                raise subprocess.TimeoutExpired(argv, timeout, _text(out), stderr + _summary(
                    _text(out), stderr, hosts)) from None
            return subprocess.CompletedProcess(argv, status, _text(out), _text(err)), slow


def _ask_for_stacks(pid: int, err: Any, within: float = 3.0) -> None:
    """A hung command's threads' stacks on its stderr (cli.py dumps them on SIGUSR1), the
    dump read once the file has stopped growing or after `within` seconds."""
    try:
        os.kill(pid, signal.SIGUSR1)
    except ProcessLookupError:
        return
    deadline, size = time.monotonic() + within, -1
    while time.monotonic() < deadline:
        now = os.fstat(err.fileno()).st_size
        if now == size and now > 0:
            return
        size = now
        time.sleep(0.2)  # a poll of the file with a deadline, not a wait for an event


# Set by the lab_factory fixture (tests/conftest.py): the directories of the test's labs.
LABS_ENV = "CARGOSHIP_TEST_LABS"
# The hosts' own daemons, left out of what a host runs: what is left is the product's
# (a restart script, its keepalive and watch, a lock's command) and what it started.
_DAEMONS = ("runsvdir", "runsv ", "svlogd", "sshd -D", "/usr/sbin/sshd", "python3 ",
            "etcd ", "ps -eo")


def hosts_now() -> str:
    """What the hosts of the test's labs run now, but their daemons: where a command that
    hangs waits on the far side."""
    dirs = [d for d in os.environ.get(LABS_ENV, "").split(os.pathsep) if d]
    if not dirs:
        return ""
    from tests.lab import Lab  # the lab only for tests that have one

    lines = ["what the lab hosts ran (pid ppid pgid stat elapsed command; daemons left out):"]
    for folder in dirs:
        try:
            lab = Lab.load(Path(folder))
            for host in lab.hosts:
                ps = lab.exec(host.name, "ps -eo pid,ppid,pgid,stat,etime,args", check=False,
                              timeout=5).stdout.splitlines()[1:]
                lines += [f"  {host.name}: {' '.join(line.split())}"[:200] for line in ps
                          if not any(daemon in line for daemon in _DAEMONS)]
        except Exception as exc:  # a report, never a second failure
            lines.append(f"  {folder}: {type(exc).__name__}: {exc}")
    return "\n".join(lines) + "\n"


_OURS = ("/cargoship/", "/executor/", "/planner/")


def condensed_stacks(dump: str) -> str:
    """faulthandler's dump of every thread (cli.py, SIGUSR1), a line per thread that runs
    cargoship's code: where it waits, then its innermost frames of ours."""
    lines: list[str] = []
    for block in re.split(r"\n(?=(?:Current thread|Thread) 0x)", dump):
        frames = re.findall(r'File "([^"]+)", line (\d+) in (\S+)', block)
        ours = [f for f in frames if any(part in f[0] for part in _OURS)]
        if not frames or not ours:
            continue
        shown = ([frames[0]] if frames[0] is not ours[0] else []) + ours[:4]
        lines.append("  " + " < ".join(f"{name} ({_short(path)}:{line})"
                                       for path, line, name in shown))
    return "threads in cargoship's code, innermost first:\n" + "\n".join(lines) + "\n" \
        if lines else ""


def _short(path: str) -> str:
    for part in _OURS:
        if part in path:
            return part.strip("/") + "/" + path.split(part, 1)[1]
    return path.rsplit("/", 1)[-1]


def _summary(stdout: str, stderr: str, hosts: str) -> str:
    """Last, so that a report that keeps only an output's end keeps these: the command's
    last lines, where its threads were, what the hosts ran."""
    tail = "".join(stdout.splitlines(keepends=True)[-12:])
    return (f"\n---- the hung command, in short ----\nits last lines:\n{tail}"
            f"{condensed_stacks(stderr)}{hosts}")


def _python_env(env: Mapping[str, str]) -> dict[str, str]:
    return {name: value for name, value in env.items() if name.startswith("PYTHON")}


def _text(file: Any) -> str:
    file.seek(0)
    # As subprocess.run(text=True) reads a pipe: the locale's encoding, universal newlines.
    wrapper = io.TextIOWrapper(file, newline=None)
    try:
        return wrapper.read()
    finally:
        wrapper.detach()


ZYGOTE = Zygote()


def _said(output: str | bytes | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


# A command that passed but took this long is named in the run's warnings with its output:
# a test that once took 275 s instead of 25 (and passed) left nothing to say where its
# time went (tests/bench/FINDINGS.md, 2026-12-05).
SLOW_COMMAND = 60.0


class SlowCommand(UserWarning):
    pass


def cargoship(*args: str | Path, env: dict[str, str] | None = None, timeout: float = 180,
              exec_: bool = False) -> subprocess.CompletedProcess[str]:
    argv = [*cargoship_argv(), *map(str, args)]
    full_env = {**os.environ, **(env or {})}
    began = time.monotonic()
    slow = ""
    try:
        if exec_ or not ZYGOTE.starts_like(full_env) or \
                os.environ.get("CARGOSHIP_TEST_EXEC") == "1":
            result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                                    env=full_env, stdin=subprocess.DEVNULL)
        else:
            script = argv[0] if len(argv) == 1 + len(args) else "cargoship"
            result, slow = ZYGOTE.run([script, *map(str, args)], full_env, timeout)
    except subprocess.TimeoutExpired as exc:  # what it said by then says where it hung
        raise AssertionError(f"cargoship {' '.join(map(str, args))}: still running after "
                             f"{timeout:g} s; its output so far:\n{_said(exc.stdout)}"
                             f"{_said(exc.stderr)}") from None
    assert "Traceback" not in result.stderr, result.stderr
    assert "Traceback" not in result.stdout, result.stdout
    took = time.monotonic() - began
    if took > SLOW_COMMAND:
        warnings.warn(SlowCommand(f"cargoship {' '.join(map(str, args))} took {took:.0f} s "
                                  f"(exit {result.returncode}); its output:\n"
                                  f"{result.stdout[-3000:]}{result.stderr[-2000:]}\n"
                                  f"{SLOW_COMMAND:g} s into it, {slow}"),
                      stacklevel=2)
    return result


def edit_config(path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    """Load a cluster.yaml, let `edit(data)` change it, write it back; returns the path."""
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
