"""A process that has imported cargoship once and forks a `cargoship` command per request.

Most of a test's `cargoship` command is spent importing (0.2-0.6 s of CPU: the package, the
SSH stack, the kubernetes client), and the suite runs about 900 of them: over half of its
CPU (tests/bench/FINDINGS.md, "The suite's CPU by process, again"). Forked from here, each
command is still its own process, with its own argv, environment, working directory,
stdin/stdout/stderr and exit status, running the same `cargoship.cli.run()` the installed
script runs; only the imports are done already. What a fork cannot show (the installed
script itself, what a command imports, its start-up time) the tests that look at those run
the real script (tests/e2e/cli.py, `exec_=True`; CARGOSHIP_TEST_EXEC=1 runs every command
that way).

Protocol, over a SOCK_SEQPACKET Unix socket, one connection per command: the client sends
one JSON message {"argv", "env", "cwd"} with its stdin, stdout and stderr as file
descriptors; the zygote answers {"pid": N} at once and {"status": S} when the command ends
(S as subprocess's returncode: negative for a signal). The zygote is single-threaded (a
fork copies only the thread that forks, and any lock another thread held stays held in the
child) and ends when its parent closes its stdin.
"""

from __future__ import annotations

import atexit
import importlib
import io
import json
import os
import pkgutil
import selectors
import signal
import socket
import sys
import threading
from typing import Any

PACKAGES = ("cargoship", "planner", "executor")
ALSO = ("kubernetes.client", "kubernetes.config", "kubernetes.watch")


def _preload() -> None:
    for name in PACKAGES:
        package = importlib.import_module(name)
        for module in pkgutil.walk_packages(package.__path__, f"{name}."):
            if not module.name.endswith("__main__"):
                importlib.import_module(module.name)
    for name in ALSO:
        importlib.import_module(name)


def serve(path: str) -> tuple[socket.socket, dict[str, Any], list[int]] | None:
    """Serve until the parent goes; in a forked child, return its connection, request and
    file descriptors (the child runs the command outside every frame of this loop)."""
    _preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wake_r, selectors.EVENT_READ, "child")
    selector.register(sys.stdin, selectors.EVENT_READ, "parent")
    running: dict[int, socket.socket] = {}
    print("ready", flush=True)
    while True:
        for key, _ in selector.select():
            if key.data == "parent":
                if not os.read(sys.stdin.fileno(), 4096):
                    return None
            elif key.data == "child":
                os.read(wake_r, 4096)
                _reap(running)
            else:
                conn, _ = listener.accept()
                message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    selector.close()
                    for end in (listener, *running.values()):
                        end.close()
                    for fd in (wake_r, wake_w):
                        os.close(fd)
                    return conn, json.loads(message), fds
                for fd in fds:
                    os.close(fd)
                running[pid] = conn
                conn.send(json.dumps({"pid": pid}).encode())
        _reap(running)


def _reap(running: dict[int, socket.socket]) -> None:
    for pid in list(running):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            conn = running.pop(pid)
            try:
                conn.send(json.dumps({"status": os.waitstatus_to_exitcode(status)}).encode())
            except OSError:
                pass  # the client gave up on it
            conn.close()


def command(conn: socket.socket, request: dict[str, Any], fds: list[int]) -> Any:
    """In the forked child: become the command a shell would have started, then run it."""
    conn.close()
    for number, fd in enumerate(fds):
        os.dup2(fd, number)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = list(request["argv"])
    # Streams as Python opens them at start-up for a pipe or a file (or a terminal).
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)),
                                 encoding=sys.stdin.encoding, errors=sys.stdin.errors)
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)),
                                  encoding=sys.stdout.encoding, errors=sys.stdout.errors,
                                  line_buffering=os.isatty(1))
    sys.stderr = io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
                                  encoding=sys.stderr.encoding, errors=sys.stderr.errors,
                                  line_buffering=True)
    from cargoship.cli import run
    return run()


def exit_as_python(run: Any) -> None:
    """End the command as the interpreter ends the installed script (`sys.exit(run())`):
    its exit code, or a traceback and 1; threads joined, atexit run, streams flushed. But
    without tearing down every module the zygote imported, which would cost more than the
    fork saves."""
    try:
        code = run()
    except SystemExit as exc:
        code = exc.code
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())
        # The interpreter ends by the signal itself (bpo-1054041): the shell sees SIGINT.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 1
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code & 0xFF
    else:
        print(code, file=sys.stderr)
        status = 1
    threading._shutdown()  # type: ignore[attr-defined]  # what the interpreter calls first
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            status = status or 120  # as Python does when flushing stdout fails at exit
    os._exit(status)


if __name__ == "__main__":
    job = serve(sys.argv[1])
    if job is not None:
        exit_as_python(lambda: command(*job))
