"""Run the real `cargoship` command the way a user does, and hold it to the one-line rule.

A command runs as its own process, forked from a process that has imported cargoship
already (tests/e2e/zygote.py: the imports are most of a command's CPU); `exec_=True`, or
CARGOSHIP_TEST_EXEC=1 for every command, starts the installed script instead."""

from __future__ import annotations

import atexit
import io
import json
import os
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
            ) -> subprocess.CompletedProcess[str]:
        path = self._socket()
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
                open(os.devnull, "rb") as nothing, \
                socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn:
            conn.connect(path)
            request = {"argv": argv, "env": env, "cwd": os.getcwd()}
            socket.send_fds(conn, [json.dumps(request).encode()],
                            [nothing.fileno(), out.fileno(), err.fileno()])
            pid = json.loads(conn.recv(4096))["pid"]
            conn.settimeout(timeout)
            try:
                status = json.loads(conn.recv(4096))["status"]
            except TimeoutError:
                _ask_for_stacks(pid, err)
                os.kill(pid, signal.SIGKILL)
                conn.settimeout(None)
                conn.recv(4096)
                raise subprocess.TimeoutExpired(argv, timeout, _text(out), _text(err)) from None
            return subprocess.CompletedProcess(argv, status, _text(out), _text(err))


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
    try:
        if exec_ or not ZYGOTE.starts_like(full_env) or \
                os.environ.get("CARGOSHIP_TEST_EXEC") == "1":
            result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                                    env=full_env, stdin=subprocess.DEVNULL)
        else:
            script = argv[0] if len(argv) == 1 + len(args) else "cargoship"
            result = ZYGOTE.run([script, *map(str, args)], full_env, timeout)
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
                                  f"{result.stdout[-3000:]}{result.stderr[-2000:]}"),
                      stacklevel=2)
    return result


def edit_config(path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    """Load a cluster.yaml, let `edit(data)` change it, write it back; returns the path."""
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
