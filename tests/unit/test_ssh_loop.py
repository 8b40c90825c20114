"""The plan's SSH loop (one thread driving every libssh2 session), the handshake queue in
front of it, and the libssh2 host key preference, with real sockets and fake sessions."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import Future
from typing import Any

import paramiko
import pytest

from planner.hosts.handshakes import Handshakes
from planner.hosts.libssh2 import (
    LIBSSH2_ERROR_EAGAIN,
    PARAMIKO_HOST_KEY_ORDER,
    Lite,
    _host_key_order,
)
from planner.hosts.reach import Dialled
from planner.hosts.ssh_loop import BLOCK_INBOUND, LoopClosed, SshLoop
from tests.unit.test_reach import silent_listener


class _Session:
    """What the loop asks of a session: which way it waits."""

    def block_directions(self) -> int:
        return BLOCK_INBOUND


def _reader(sock: socket.socket, want: int) -> Generator[None, None, bytes]:
    """Reads `want` bytes without blocking, yielding whenever nothing is there yet."""
    got = b""
    while len(got) < want:
        try:
            got += sock.recv(want - len(got))
        except BlockingIOError:
            yield
    return got


@pytest.fixture
def loop() -> Iterator[SshLoop]:
    running = SshLoop()
    yield running
    running.close()
    assert "cargoship-ssh" not in [t.name for t in threading.enumerate()]


@pytest.fixture
def pair() -> Iterator[Callable[[], tuple[socket.socket, socket.socket]]]:
    """Socket pairs (the first end non-blocking), all closed when the test ends."""
    made: list[socket.socket] = []

    def make() -> tuple[socket.socket, socket.socket]:
        a, b = socket.socketpair()
        a.setblocking(False)
        made.extend((a, b))
        return a, b

    yield make
    for end in made:
        end.close()


def test_jobs_run_side_by_side_on_one_thread_and_end_with_their_values(loop, pair) -> None:
    pairs = [pair() for _ in range(20)]
    jobs = [loop.submit(a, _Session(), _reader(a, 3), 10, lambda: TimeoutError())
            for a, _ in pairs]
    # Answered in reverse order: each job resumes when its own socket is readable.
    for index, (_, b) in reversed(list(enumerate(pairs))):
        b.sendall(f"{index:03d}".encode())
    assert [j.result(5) for j in jobs] == [f"{i:03d}".encode() for i in range(20)]
    assert [t.name for t in threading.enumerate()].count("cargoship-ssh") == 1


def test_a_silent_peer_times_out_at_its_deadline_and_others_go_on(loop, pair) -> None:
    (a, _), (c, d) = pair(), pair()
    started = time.monotonic()
    silent = loop.submit(a, _Session(), _reader(a, 1), 0.3, lambda: TimeoutError("late"))
    later = loop.submit(c, _Session(), _reader(c, 1), 10, lambda: TimeoutError())
    with pytest.raises(TimeoutError, match="late"):
        silent.result(5)
    assert 0.25 <= time.monotonic() - started < 3
    d.sendall(b"x")
    assert later.result(5) == b"x"


def test_a_job_that_raises_hands_its_exception_to_whoever_waits(loop, pair) -> None:
    def broken() -> Generator[None, None, None]:
        raise ValueError("the host said something odd")
        yield  # a generator all the same

    a, _ = pair()
    with pytest.raises(ValueError, match="odd"):
        loop.submit(a, _Session(), broken(), 10, lambda: TimeoutError()).result(5)


def test_closing_the_loop_fails_running_jobs_and_a_later_run_starts_it_again(loop,
                                                                              pair) -> None:
    """`history` plans after reading records, with the same connect options: the second
    run's jobs must not meet the first run's closed loop."""
    (a, _), (c, d) = pair(), pair()
    waiting = loop.submit(a, _Session(), _reader(a, 1), 60, lambda: TimeoutError())
    loop.close()
    with pytest.raises(LoopClosed):
        waiting.result(5)
    assert "cargoship-ssh" not in [t.name for t in threading.enumerate()]
    again = loop.submit(c, _Session(), _reader(c, 1), 60, lambda: TimeoutError())
    d.sendall(b"y")
    assert again.result(5) == b"y"


def _take(handshakes: Handshakes, index: int) -> Any:
    claimed = handshakes.claim(index)
    return None if claimed is None else claimed.result(5)


class _Named:
    def __init__(self, label: str) -> None:
        self.label = label
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_handshakes_keep_to_the_limit_and_fall_back_to_a_thread() -> None:
    """Fast handshakes are started `limit` at a time, in order; a host the fast path does
    not take (None) or whose key it saw refused (a None result) goes to the opener."""
    started: list[int] = []
    futures: dict[int, Future[Any]] = {}
    lock = threading.Lock()

    def fast(index: int) -> Future[Any] | None:
        with lock:
            started.append(index)
        if index == 1:
            return None  # not for the fast path
        futures[index] = Future()
        return futures[index]

    handshakes = Handshakes(6, lambda i: _Named(f"thread-{i}"), 2, fast)  # type: ignore[arg-type,return-value]
    # 0 is fast and running, 1 went to a thread (and ends there), so 2 starts too.
    assert _take(handshakes, 1).label == "thread-1"  # type: ignore[union-attr]
    assert started == [0, 1, 2]
    futures[0].set_result(_Named("fast-0"))
    assert started == [0, 1, 2, 3]
    futures[2].set_result(None)  # refused over libssh2: the opener, in the same slot
    assert _take(handshakes, 2).label == "thread-2"  # type: ignore[union-attr]
    futures[3].set_exception(OSError("refused"))
    with pytest.raises(OSError, match="refused"):
        _take(handshakes, 3)
    assert started == [0, 1, 2, 3, 4, 5]
    assert _take(handshakes, 0).label == "fast-0"  # type: ignore[union-attr]
    assert _take(handshakes, 0) is None  # taken already
    late = _Named("fast-4")
    handshakes.close()
    futures[4].set_result(late)
    assert late.closed  # nobody took it: closed as soon as it landed


def test_dialled_sockets_reach_a_waiting_handshake_once() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        endpoint = server.getsockname()
        dialled = Dialled()
        got: list[Any] = []
        arrived = threading.Event()
        dialled.start([endpoint], 5)

        def then(result: Any) -> None:
            got.append(result)
            arrived.set()

        assert dialled.when_ready(endpoint, then)
        assert arrived.wait(5)
        assert isinstance(got[0], socket.socket)
        got[0].close()
        assert dialled.take(endpoint, 0.1) is None  # handed over once, not twice
        assert not dialled.when_ready(("127.0.0.1", 1), then)  # never dialled here


def test_libssh2_prefers_host_key_types_as_paramiko_does() -> None:
    assert PARAMIKO_HOST_KEY_ORDER == tuple(paramiko.Transport._preferred_keys)
    assert _host_key_order({})[:2] == ["ssh-ed25519", "ecdsa-sha2-nistp256"]
    assert "ssh-dss" not in _host_key_order({})  # libssh2 does not offer it
    known = {"ecdsa-sha2-nistp384": None, "ssh-ed25519": None}
    assert _host_key_order(known)[:2] == ["ecdsa-sha2-nistp384", "ssh-ed25519"]  # type: ignore[arg-type]
    rsa = _host_key_order({"ssh-rsa": None})  # type: ignore[dict-item]
    assert rsa[:3] == ["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"]


def test_a_loop_that_breaks_fails_its_jobs_instead_of_leaving_them_waiting(loop,
                                                                            pair) -> None:
    class Broken(_Session):
        def block_directions(self) -> int:
            raise RuntimeError("a bug in the loop's own code")

    (a, _), (c, _) = pair(), pair()
    waiting = loop.submit(c, _Session(), _reader(c, 1), 60, lambda: TimeoutError())
    broken = loop.submit(a, Broken(), _reader(a, 1), 60, lambda: TimeoutError())
    for job in (broken, waiting):
        with pytest.raises(LoopClosed, match="a bug in the loop"):
            job.result(5)
    with pytest.raises(LoopClosed):
        loop.submit(a, _Session(), _reader(a, 1), 60, lambda: TimeoutError()).result(5)


def test_a_run_that_ends_before_a_host_connects_tells_its_waiting_handshake() -> None:
    full, fillers = silent_listener()
    try:
        dialled = Dialled()
        endpoint = full.getsockname()
        dialled.start([endpoint], 30)
        got: list[Any] = []
        assert dialled.when_ready(endpoint, got.append)
        dialled.close()
        assert len(got) == 1 and isinstance(got[0], ConnectionAbortedError), got
    finally:
        for s in [full, *fillers]:
            s.close()


class _Channel:
    """A channel whose stdout packet was queued by the stderr read: nothing more will come
    on the socket."""

    def __init__(self) -> None:
        self.queued = False
        self.left = [b"hello"]

    def execute(self, command: str) -> int:
        return 0

    def send_eof(self) -> int:
        return 0

    def read(self, size: int) -> tuple[int, bytes]:
        if self.queued and self.left:
            data = self.left.pop()
            return len(data), data
        return (0, b"") if not self.left else (LIBSSH2_ERROR_EAGAIN, b"")

    def read_stderr(self, size: int) -> tuple[int, bytes]:
        self.queued = True  # the packet it read off the socket was stdout's
        return LIBSSH2_ERROR_EAGAIN, b""

    def poll_channel_read(self, extended: int) -> int:
        return int(self.queued and bool(self.left))

    def eof(self) -> bool:
        return not self.left

    def wait_closed(self) -> int:
        return 0

    def get_exit_status(self) -> int:
        return 0


class _ExecSession(_Session):
    def __init__(self) -> None:
        self.channel = _Channel()

    def open_session(self) -> _Channel:
        return self.channel


def test_output_queued_by_the_other_streams_read_is_not_waited_for(loop, pair) -> None:
    a, _ = pair()
    lite = Lite("h", _ExecSession(), a, "root", "h:22", "SHA256:x", loop)
    result = lite.run("true", 2)  # a wait on the quiet socket would time out
    assert (result.exit_code, result.stdout) == (0, b"hello")
