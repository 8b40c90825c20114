"""Every answer from a Kubernetes API bounded in wall-clock time and in bytes.

The API cargoship talks to answers from a controller, and root on one controller decides
what it answers. urllib3's timeouts bound each socket read, not a request: an answer that
declares 100 MB and then sends a byte every two seconds keeps a request alive for ever,
and a valid 1 GiB list is read whole into memory (and copied) before anyone parses it.
So the official client is given this pool manager instead of urllib3's own:

* a request's whole life (connect, headers, body) has a deadline, the client's
  `_request_timeout` taken as the total (a number; a (connect, read) pair adds up). A
  watchdog thread shuts the socket of a request whose deadline passed, so the blocked read
  ends at once, whatever the server does; the caller gets AnswerTooSlow;
* an answer is read here in chunks, counting decoded bytes (a gzip bomb counts at its
  decoded size), and refused past `max_bytes` with AnswerTooLarge before it is held whole;
  the caller then gets it preloaded, as urllib3 would have given it;
* a watch (`watch=` in the query) is handed over streaming, under the same deadline; its
  reader caps each line (executor/watch.py);
* `interrupt()` ends every request in flight at once (a second Ctrl-C, SIGTERM).

Both errors are urllib3 HTTPErrors, so every caller that handles a broken connection
handles these. Exceptions:

    urllib3.exceptions.HTTPError
      AnswerRefused            the answer was cut off by this module
        AnswerTooSlow          no complete answer before the deadline (or interrupted)
        AnswerTooLarge         more than max_bytes
"""

from __future__ import annotations

import heapq
import itertools
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

import urllib3
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from .threads import start

# A node's pod list is a few MB (110 pods at most per node); a 500-node NodeList a few
# tens. Past this an answer is not one cargoship asked for.
MAX_ANSWER_BYTES = 64 * 1024 * 1024
# One watch event is one object.
MAX_WATCH_LINE_BYTES = 16 * 1024 * 1024
# A request header: hand the answer over unread, as a watch is (under the same deadline).
# For a caller that must hold connections open (node_api.py's warm-up), never for an answer
# read whole: the caller bounds its own read.
HOLD = "X-Cargoship-Hold"
# A request without a timeout of its own.
DEFAULT_TOTAL = 30.0
CHUNK = 64 * 1024
# A guard that fired while its connection was still being opened fires again this soon.
REFIRE = 0.1


class AnswerRefused(urllib3.exceptions.HTTPError):
    """The answer was cut off here: too slow or too large."""


class AnswerTooSlow(AnswerRefused):
    pass


class AnswerTooLarge(AnswerRefused):
    pass


@dataclass(eq=False)
class Guard:
    """One request's deadline, and the connection it is on once it has one."""

    deadline: float
    total: float
    conn: Any = None
    attached: bool = False  # it had a connection once
    fired: str = ""  # why the socket was shut ("" while it was not)
    done: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def attach(self, conn: Any) -> None:
        with self.lock:
            self.conn, self.attached = conn, True
            late = self.fired != ""
        if late:  # fired between connections (a redirect, a retry): end this one too
            _shut(conn)

    def detach(self, conn: Any) -> None:
        with self.lock:
            if self.conn is conn:
                self.conn = None

    def fire(self, why: str) -> bool:
        """Shut the request's socket; whether to fire again soon (a connection that had
        no socket yet, or was being opened, gets one after this)."""
        with self.lock:
            if self.done:
                return False
            self.fired = self.fired or why
            conn = self.conn
            again = conn is not None or not self.attached
        if conn is not None:
            _shut(conn)
        return again

    def finish(self) -> None:
        with self.lock:
            self.done, self.conn = True, None

    def error(self) -> AnswerTooSlow:
        if self.fired == "interrupted":
            return AnswerTooSlow("interrupted")
        return AnswerTooSlow(f"no complete answer within {self.total:g} s")


def _shut(conn: Any) -> None:
    sock = getattr(conn, "sock", None)
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed: nothing is blocked on it


class Watchdog:
    """One thread that fires guards at their deadlines (a timer per request would start a
    thread per request, and a rollout's first wave sends some thirty at once)."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._heap: list[tuple[float, int, Guard]] = []
        self._order = itertools.count()
        self._live: set[Guard] = set()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def watch(self, guard: Guard) -> None:
        with self._wake:
            heapq.heappush(self._heap, (guard.deadline, next(self._order), guard))
            self._live.add(guard)
            if self._thread is None:
                self._thread = start(self._run, name="cargoship-api-deadline")
            self._wake.notify()

    def forget(self, guard: Guard) -> None:
        guard.finish()
        with self._wake:
            self._live.discard(guard)

    def interrupt(self) -> None:
        """Fire every guard in flight now."""
        now = self._clock()
        with self._wake:
            for guard in self._live:
                guard.fired = guard.fired or "interrupted"
                heapq.heappush(self._heap, (now, next(self._order), guard))
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while self._heap and self._heap[0][2].done:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._wake.wait()
                    continue
                wait = self._heap[0][0] - self._clock()
                if wait > 0:
                    self._wake.wait(wait)
                    continue
                _, _, guard = heapq.heappop(self._heap)
            again = guard.fire("deadline")
            with self._wake:
                if again:
                    heapq.heappush(self._heap, (self._clock() + REFIRE, next(self._order),
                                                guard))
                else:
                    self._live.discard(guard)


def total_seconds(timeout: Any) -> float:
    """The whole time a request may take, from what the client passed as its timeout."""
    if isinstance(timeout, int | float):
        return float(timeout)
    if isinstance(timeout, urllib3.Timeout):
        if isinstance(timeout.total, int | float):
            return float(timeout.total)
        parts = [t for t in (timeout.connect_timeout, timeout.read_timeout)
                 if isinstance(t, int | float)]
        if parts:
            return float(sum(parts))
    return DEFAULT_TOTAL


def is_watch(url: str) -> bool:
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
    return any(v.lower() in ("true", "1") for v in query.get("watch", []))


class _Guarded:
    """Mixed into urllib3's connection pools: the request in flight on this thread gets the
    connection it is sent on, and lets go of it when the connection is given back."""

    manager: BoundedPoolManager

    def _make_request(self, conn: Any, *args: Any, **kwargs: Any) -> Any:
        self.manager.attach(conn)
        return super()._make_request(conn, *args, **kwargs)  # type: ignore[misc]

    def _put_conn(self, conn: Any) -> None:
        # Whatever guard still points at this connection must never shut it once it
        # serves another request.
        self.manager.release(conn)
        super()._put_conn(conn)  # type: ignore[misc]


class BoundedPoolManager(urllib3.PoolManager):
    def __init__(self, *, max_bytes: int = MAX_ANSWER_BYTES, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_bytes = max_bytes
        self.watchdog = Watchdog()
        self._local = threading.local()
        self._by_conn: dict[int, Guard] = {}
        self._by_conn_lock = threading.Lock()
        manager = self

        class Http(_Guarded, HTTPConnectionPool):
            pass

        class Https(_Guarded, HTTPSConnectionPool):
            pass

        Http.manager = Https.manager = manager
        self.pool_classes_by_scheme = {"http": Http, "https": Https}

    def attach(self, conn: Any) -> None:
        """The request of this thread is sent on `conn`."""
        guard: Guard | None = getattr(self._local, "guard", None)
        if guard is None:
            return
        with self._by_conn_lock:
            self._by_conn[id(conn)] = guard
        guard.attach(conn)

    def release(self, conn: Any) -> None:
        if conn is None:
            return
        with self._by_conn_lock:
            guard = self._by_conn.pop(id(conn), None)
        if guard is not None:
            guard.detach(conn)

    def interrupt(self) -> None:
        """End every request in flight now (each raises AnswerTooSlow("interrupted"))."""
        self.watchdog.interrupt()

    def urlopen(self, method: str, url: str, redirect: bool = True,  # type: ignore[override]
                **kw: Any) -> Any:
        total = total_seconds(kw.get("timeout"))
        guard = Guard(time.monotonic() + total, total)
        preload = kw.pop("preload_content", True)
        self.watchdog.watch(guard)
        self._local.guard = guard
        streaming = False
        try:
            try:
                response = super().urlopen(method, url, redirect=redirect,
                                           preload_content=False, **kw)
            except Exception as exc:
                if guard.fired:
                    raise guard.error() from exc
                raise
            finally:
                self._local.guard = None
            if not preload and (is_watch(url) or HOLD in (kw.get("headers") or {})):
                streaming = True  # the watchdog keeps it until the deadline or release
                return response
            return self._read_whole(response, guard)
        finally:
            if not streaming:
                self.watchdog.forget(guard)
                with self._by_conn_lock:
                    for key in [k for k, g in self._by_conn.items() if g is guard]:
                        del self._by_conn[key]

    def _read_whole(self, response: Any, guard: Guard) -> Any:
        """The answer read here, bounded, and handed on as if urllib3 had preloaded it."""
        body = bytearray()
        try:
            while True:
                chunk = response.read(CHUNK)
                if not chunk:
                    break
                body += chunk
                if len(body) > self.max_bytes:
                    raise AnswerTooLarge(
                        f"answer larger than {self.max_bytes // (1024 * 1024)} MiB")
        except AnswerTooLarge:
            response.close()
            response.release_conn()
            raise
        except Exception as exc:
            response.close()
            response.release_conn()
            if guard.fired:
                raise guard.error() from exc
            raise
        if guard.fired:  # the read ended early because the socket was shut
            response.close()
            response.release_conn()
            raise guard.error()
        response.release_conn()
        return urllib3.HTTPResponse(body=bytes(body), headers=response.headers,
                                    status=response.status, reason=response.reason,
                                    preload_content=True, decode_content=False,
                                    request_method=getattr(response, "_request_method", None),
                                    request_url=response.url)
