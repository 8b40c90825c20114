"""Watches on the lab's Kubernetes API stand-in: `GET <collection>?watch=1`.

As the real API server (its watch cache) serves them over HTTP/1.1: status 200, a chunked
body of one JSON event per line, {"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR,
"object": ...}, each flushed when it happens.

- resourceVersion unset or "0": a synthetic ADDED for every matching object, then changes;
  N: every change after N, from the store's event history (Store.history). N older than
  the history: one ERROR event, a Status 410 Expired, and the end of the stream.
- fieldSelector/labelSelector are judged on the object before and after each change: one
  that starts matching is ADDED, one that stops matching DELETED (its last matching state,
  with the change's resourceVersion), as the watch cache does.
- timeoutSeconds ends the stream (cleanly: the terminating chunk); unset, a random 30-60
  minutes (kube-apiserver's --min-request-timeout 1800 s, times 1 to 2).
- allowWatchBookmarks: a BOOKMARK (only metadata.resourceVersion) every minute and 2 s
  before the timeout, as the watch cache's nextBookmarkTime schedules them.

A front end (--upstream) relays the datastore's stream chunk by chunk. Both ends notice,
within IDLE seconds, a client that went away and a server shutting down, so neither leaks
a thread. Standard library only (runs on a lab host's system Python).
"""

from __future__ import annotations

import copy
import json
import random
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from kubeapi_lang import selector
from kubeapi_store import ApiError, Event, Kind, Obj, Store, bad_request

IDLE = 1.0  # seconds between checks of a quiet watch's client and the server's shutdown
BOOKMARK_EVERY = 60.0  # the watch cache's bookmarkFrequency
MIN_REQUEST_TIMEOUT = 1800.0  # kube-apiserver --min-request-timeout's default
TOO_LARGE_WAIT = 3.0  # how long a watch from a future resourceVersion waits for it


def wants_watch(method: str, query: dict[str, str]) -> bool:
    return method == "GET" and query.get("watch", "").lower() in ("1", "true")


def _flag(query: dict[str, str], name: str) -> bool:
    return query.get(name, "").lower() in ("1", "true")


class Watch:
    """One watch's parameters, checked before any response is sent (errors are a plain
    Status response then), and its events as a generator."""

    def __init__(self, store: Store, kind: Kind, ns: str | None, query: dict[str, str],
                 closing: threading.Event):
        self.store, self.kind, self.ns, self.closing = store, kind, ns, closing
        self.match = selector(kind, query)
        rv = query.get("resourceVersion", "")
        if rv not in ("", "0") and not rv.isdigit():
            raise bad_request(f"invalid resource version: {rv!r}")
        self.since = int(rv) if rv not in ("", "0") else None
        timeout = query.get("timeoutSeconds", "")
        if timeout and not timeout.isdigit():
            raise bad_request(f"invalid timeoutSeconds: {timeout!r}")
        seconds = int(timeout) if timeout else MIN_REQUEST_TIMEOUT * (1 + random.random())
        self.deadline = time.monotonic() + seconds
        self.bookmarks = _flag(query, "allowWatchBookmarks")

    def _passes(self, obj: Obj | None) -> bool:
        return obj is not None and (self.ns is None or obj["metadata"].get("namespace")
                                    == self.ns) and self.match(obj)

    def _convert(self, event: Event) -> Obj | None:
        """The event as this watcher sees it through its selectors, or None."""
        if event.resource != self.kind.resource:
            return None
        now, before = event.type != "DELETED" and self._passes(event.obj), \
            self._passes(event.prev)
        if now:
            return {"type": "MODIFIED" if before else "ADDED", "object": event.obj}
        if before:
            assert event.prev is not None
            gone = copy.deepcopy(event.prev)
            gone["metadata"]["resourceVersion"] = str(event.rv)
            return {"type": "DELETED", "object": gone}
        return None

    def _next_bookmark(self, now: float) -> float | None:
        if not self.bookmarks:
            return None
        at = min(now + BOOKMARK_EVERY, self.deadline - 2)
        return at if at >= now else None

    def _error(self, error: ApiError) -> Obj:
        return {"type": "ERROR", "object": error.status()}

    def _start(self) -> tuple[list[Obj], int | Obj]:
        """The initial events and the resourceVersion to follow on from, or an ERROR."""
        store = self.store
        with store.changed:
            if self.since is None:
                added = [{"type": "ADDED", "object": store._view(self.kind, obj)}
                         for _, obj in sorted(store.objects[self.kind.resource].items())]
                return [e for e in added if self._passes(e["object"])], store.rv
            if self.since < store.floor:  # an ERROR event on a 200 stream, as for real
                return [], self._error(_expired(self.since, store.floor))
            wait_until = time.monotonic() + TOO_LARGE_WAIT
            while store.rv < self.since and time.monotonic() < wait_until:
                store.changed.wait(wait_until - time.monotonic())
            if store.rv < self.since:
                return [], self._error(ApiError(
                    504, "Timeout", f"Too large resource version: {self.since}, current: "
                    f"{store.rv}", {"causes": [{"reason": "ResourceVersionTooLarge",
                                                "message": "Too large resource version"}],
                                    "retryAfterSeconds": 1}))
            return [], self.since

    def events(self) -> Iterator[Obj | None]:
        """Events to send; None when a wait of up to IDLE seconds brought nothing (the
        caller then checks that its client is still there)."""
        initial, start = self._start()
        if isinstance(start, dict):
            yield start
            return
        yield from initial
        pos, store = start, self.store
        bookmark_at = self._next_bookmark(time.monotonic())
        while not self.closing.is_set() and not store.closed.is_set():
            now = time.monotonic()
            if now >= self.deadline:
                return
            if bookmark_at is not None and now >= bookmark_at:
                yield {"type": "BOOKMARK", "object": {
                    "kind": self.kind.kind, "apiVersion": self.kind.api_version,
                    "metadata": {"resourceVersion": str(pos)}}}
                bookmark_at = self._next_bookmark(time.monotonic())
            with store.changed:
                if pos < store.floor:  # fell out of the window (a far too slow reader)
                    yield self._error(_expired(pos, store.floor))
                    return
                if store.rv == pos:
                    wait = min(IDLE, self.deadline - now, *(
                        [max(0.0, bookmark_at - now)] if bookmark_at is not None else []))
                    store.changed.wait(wait)
                batch = _since(store.history, pos)
                pos = store.rv
            sent = False
            for event in batch:
                out = self._convert(event)
                if out is not None:
                    sent = True
                    yield out
            if not sent:
                yield None


def _expired(rv: int, floor: int) -> ApiError:
    return ApiError(410, "Expired", f"too old resource version: {rv} ({floor})")


def _since(history: Any, pos: int) -> list[Event]:
    """The events after resourceVersion `pos`, oldest first (the newest are at the end)."""
    out = []
    for event in reversed(history):
        if event.rv <= pos:
            break
        out.append(event)
    out.reverse()
    return out


# --- HTTP -------------------------------------------------------------------------------

def client_gone(conn: socket.socket) -> bool:
    """Whether the client hung up: its side is readable, and reads end of stream (peeked
    at on a plain socket, so a pipelined request would stay where it is)."""
    try:
        readable, _, _ = select.select([conn], [], [], 0)
        if not readable:
            return False
        if isinstance(conn, ssl.SSLSocket):
            # A TLS client closes with a close_notify alert before its FIN: any bytes
            # mid-watch (clients do not pipeline behind a watch) mean it is going.
            conn.settimeout(0)
            try:
                return conn.recv(1) == b""
            except ssl.SSLWantReadError:
                return False
            except ssl.SSLError:
                return True
            finally:
                conn.settimeout(None)
        return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (OSError, ValueError):
        return True


def start_chunked(handler: Any, code: int = 200) -> None:
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Cache-Control", "no-cache, private")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    handler.wfile.flush()


def write_chunk(handler: Any, data: bytes) -> None:
    """A chunk, flushed; b"" is the terminating chunk."""
    handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if data else b"0\r\n\r\n")
    handler.wfile.flush()


def serve_watch(handler: Any, store: Store, kind: Kind, ns: str | None,
                query: dict[str, str], closing: threading.Event,
                table: Callable[[Obj], Obj] | None = None,
                transform: Callable[[Obj], Obj] | None = None) -> None:
    """Answer a watch request on the datastore. ApiErrors raised before the first byte is
    sent are the caller's to answer, as for any request. `table` makes a list a Table:
    each event's object is then a one-row Table. `transform` changes each event (a lab
    fault's wrong shape)."""
    watch = Watch(store, kind, ns, query, closing)
    if not _cache_ready(handler, store, watch, closing):
        return
    try:
        start_chunked(handler)
        for event in watch.events():
            if event is None:
                if client_gone(handler.connection):
                    handler.close_connection = True
                    return
                continue
            if table is not None and event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                obj = event["object"]
                event = {"type": event["type"], "object": table({"metadata": {
                    "resourceVersion": obj["metadata"].get("resourceVersion")},
                    "items": [obj]})}
            if transform is not None and event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                event = transform(event)
            write_chunk(handler, json.dumps(event).encode() + b"\n")
        write_chunk(handler, b"")
    except OSError:  # the client went away mid-write: nothing to answer, nobody to tell
        handler.close_connection = True
    if closing.is_set():
        handler.close_connection = True


def _cache_ready(handler: Any, store: Store, watch: Watch, closing: threading.Event) -> bool:
    """Hold the watch until the store's cache is ready to serve it, with no quorum read,
    as kube-apiserver 1.30's Cacher.Watch does: until the cache is ready, or the watch's
    own time is up (then 503, as its context's deadline makes it). False: the client
    went away or the server is closing meanwhile (nothing to answer)."""
    while not store.ready(min(IDLE, max(0.0, watch.deadline - time.monotonic()))):
        if closing.is_set() or client_gone(handler.connection):
            handler.close_connection = True
            return False
        if time.monotonic() >= watch.deadline:
            raise ApiError(503, "ServiceUnavailable", "context deadline exceeded")
    return True


# --- relaying a watch through a front end -----------------------------------------------

class _Upstream:
    """A watch request to the datastore over a plain socket: http.client's reader cannot
    be read again after a timeout, and a quiet watch has to be waited on in slices."""

    def __init__(self, host: str, port: int, request: bytes):
        self.sock = socket.create_connection((host, port), timeout=10)
        self.sock.sendall(request)
        self.sock.settimeout(IDLE)
        self.buf = bytearray()
        self.idle: Callable[[], bool] = lambda: False

    def _fill(self) -> None:
        while True:
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                if self.idle():
                    raise _Stop() from None
                continue
            if not data:
                raise EOFError("the datastore closed the connection")
            self.buf += data
            return

    def line(self) -> bytes:
        while (end := self.buf.find(b"\r\n")) < 0:
            self._fill()
        out = bytes(self.buf[:end])
        del self.buf[:end + 2]
        return out

    def take(self, size: int) -> bytes:
        while len(self.buf) < size:
            self._fill()
        out = bytes(self.buf[:size])
        del self.buf[:size]
        return out


class _Stop(Exception):
    """The client went away, or the server is shutting down."""


def forward_watch(handler: Any, host: str, port: int, headers: dict[str, str],
                  closing: threading.Event,
                  divert: Callable[[str | None, bytes], bool] | None = None) -> None:
    """Send a watch request on to the datastore and its answer back: a chunked stream
    chunk by chunk as it comes, anything else (an error Status) whole, unless
    divert(its X-Lab-Hostile header, its body) answered it (a lab fault)."""
    head = "".join(f"{k}: {v}\r\n" for k, v in {**headers, "Connection": "close"}.items())
    # OSError here (no datastore) is the caller's to answer, before anything was sent.
    upstream = _Upstream(host, port, f"GET {handler.path} HTTP/1.1\r\n{head}\r\n".encode())
    upstream.idle = lambda: closing.is_set() or client_gone(handler.connection)
    started = False
    try:
        status = upstream.line().split(b" ", 2)
        fields = {}
        while line := upstream.line():
            name, _, value = line.decode("latin-1").partition(":")
            fields[name.strip().lower()] = value.strip()
        code = int(status[1])
        if "chunked" not in fields.get("transfer-encoding", "").lower():
            data = upstream.take(int(fields.get("content-length") or 0))
            if divert is not None and divert(fields.get("x-lab-hostile"), data):
                return
            handler.send_response(code)
            handler.send_header("Content-Type", fields.get("content-type", "application/json"))
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
            return
        start_chunked(handler, code)
        started = True
        while size := int(upstream.line().split(b";")[0], 16):
            write_chunk(handler, upstream.take(size))
            upstream.take(2)  # the chunk's CRLF
        write_chunk(handler, b"")
    except _Stop:  # the client left, or the server is stopping
        handler.close_connection = True
    except (EOFError, OSError, ValueError) as exc:
        # The datastore went away mid-stream (or the client, mid-write): this connection's
        # framing ends here, so it closes and the client sees the cut.
        handler.close_connection = True
        if not started and not client_gone(handler.connection):
            raise OSError(f"the datastore's answer ended early: {exc}") from None
    finally:
        upstream.sock.close()
