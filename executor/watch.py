"""Following API objects with the Kubernetes watch instead of asking again and again.

A watch is a list request with `watch=1` from a resourceVersion: the API server streams
one JSON event per line for every change after it (ADDED, MODIFIED, DELETED; BOOKMARK; an
ERROR with a Status, 410 when that version is too old). The official client's Watch helper
turns every event into model objects and cannot be interrupted from another thread; here
the raw response is read line by line, the objects stay JSON, and `close` shuts the
response from any thread (urllib3's shutdown), so a rollout stops watching the moment the
host is back.

When a watch breaks (the API server restarting, a version too old, a timeout), the object
is read again (a list or a get gives the current version and its resourceVersion) and
watched from there; attempts are paced by polling.pause, so an API that is down is asked
a few times a second at first and about once a second later.

A watch is served from its API server's watch cache, which that controller's own etcd
member feeds: when the member hangs, the watch goes silent rather than breaking, and
nothing here can tell. So each caller also reads afresh at intervals, through whichever
controller's API server answers (drain.py's pods, restart_follow.py's node).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from planner.kube_bounds import MAX_WATCH_LINE_BYTES

from . import api_shape
from .polling import pause

log = logging.getLogger("cargoship.executor")

# The server ends each watch after this long; the loop then simply watches again.
WATCH_SECONDS = 60
CONNECT_TIMEOUT = 5.0
RETRY_CAP = 1.0


class WatchBroken(Exception):
    """The stream ended or failed; `gone` when its resourceVersion expired (410)."""

    def __init__(self, why: str, gone: bool = False) -> None:
        super().__init__(why)
        self.gone = gone


@dataclass(frozen=True)
class WatchEvent:
    # ADDED, MODIFIED, DELETED, BOOKMARK; SYNCED after a fresh read: its object's "items"
    # are every object there is now (whatever is not among them is gone).
    type: str
    object: dict[str, Any]


def stream_lines(response: Any, limit: int = MAX_WATCH_LINE_BYTES) -> Iterator[bytes]:
    """The lines of a streamed response, as they arrive; WatchBroken for a line longer
    than `limit` (one event is one object: a longer one is no answer to this watch)."""
    pending = bytearray()
    # amt=None: each chunk as the server flushed it (a watch is chunked), not a full buffer.
    for chunk in response.stream(None, decode_content=True):
        start = len(pending)
        pending += chunk
        # Only the new bytes are searched: a line dripping in is never scanned again.
        end = pending.find(b"\n", start)
        if end < 0:
            if len(pending) > limit:
                raise WatchBroken(f"a watch event longer than {limit // (1024 * 1024)} MiB")
            continue
        *lines, rest = bytes(pending).split(b"\n")
        pending = bytearray(rest)
        for line in lines:
            if len(line) > limit:
                raise WatchBroken(f"a watch event longer than {limit // (1024 * 1024)} MiB")
            if line.strip():
                yield line
    if bytes(pending).strip():
        yield bytes(pending)


def events(response: Any) -> Iterator[WatchEvent]:
    """A watch response's events; WatchBroken for an ERROR event or a bad line."""
    for line in stream_lines(response):
        try:
            event = json.loads(line)
            kind, obj = event["type"], event["object"]
        except (ValueError, KeyError, TypeError):
            raise WatchBroken(f"unreadable watch event {line[:80]!r}") from None
        if kind == "ERROR":
            status = obj if isinstance(obj, dict) else {}
            raise WatchBroken(f"watch error: {status.get('message') or obj}",
                              gone=status.get("code") == 410)
        if isinstance(obj, dict):
            yield WatchEvent(kind, obj)


def resource_version(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


@dataclass
class Watcher:
    """Watches what `open_watch(resource_version)` streams, handing every event to
    `handle`, re-reading with `relist` whenever the stream breaks. Runs in the caller's
    thread (`run`) until `handle` returns True, `close` is called, or `until` passes."""

    open_watch: Callable[[str], Any]  # resourceVersion -> a streamed response
    relist: Callable[[], tuple[list[dict[str, Any]], str]]  # (current objects, version)
    handle: Callable[[WatchEvent], bool]  # True: done watching
    broken: Callable[[str], None] = lambda why: None  # told why the object is unreadable
    clock: Callable[[], float] = time.monotonic
    _closed: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _response: Any = None

    def run(self, since: str, until: float) -> bool:
        """Watch from resourceVersion `since` ("" to read first); True when `handle` said
        done, False at `until` or on close. Exceptions from `broken` end it."""
        version, failing_since = since, None
        while not self._closed.is_set() and self.clock() < until:
            try:
                if not version:
                    objects, version = self.relist()
                    if self.handle(WatchEvent("SYNCED", {"items": objects})):
                        return True
                done, version = self._watch(version, until)
                if done:
                    return True
                failing_since = None
                continue  # the server ended the watch: watch again from where it was
            except api_shape.ApiShapeError:
                raise  # an answer of the wrong shape is not a hiccup: the caller decides
            except WatchBroken as exc:
                version = ""  # too old, or unreadable: read the current version again
                if exc.gone:
                    continue
                failing_since = self._failed(str(exc), failing_since)
            except Exception as exc:  # noqa: BLE001 - API down, TLS, timeouts: read again
                if self._closed.is_set():
                    break
                version = ""
                failing_since = self._failed(f"{type(exc).__name__}: {exc}", failing_since)
            waited = self.clock() - (failing_since or self.clock())
            self._closed.wait(min(pause(waited, RETRY_CAP), max(0.0, until - self.clock())))
        return False

    def _failed(self, why: str, since: float | None) -> float:
        log.debug("watch: %s", why)
        self.broken(why)
        return self.clock() if since is None else since

    def _watch(self, version: str, until: float) -> tuple[bool, str]:
        """(done, the last resourceVersion seen) once the stream ends."""
        response = self.open_watch(version)
        with self._lock:
            if self._closed.is_set():
                _discard(response)
                return False, version
            self._response = response
        finished = False
        try:
            for event in events(response):
                version = resource_version(event.object) or version
                if event.type != "BOOKMARK" and self.handle(event):
                    return True, version
                if self.clock() >= until:
                    return False, version
            finished = True
            return False, version
        finally:
            with self._lock:
                self._response = None
            if finished:
                response.release_conn()  # read to its end: the connection can serve again
            else:
                _discard(response)

    def wait_closed(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for close(); whether it was called."""
        return self._closed.wait(timeout)

    def close(self) -> None:
        """Stop watching, from any thread: the blocked read ends at once."""
        self._closed.set()
        with self._lock:
            response = self._response
        if response is not None:
            try:
                response.shutdown()
            except Exception as exc:  # noqa: BLE001 - closing must never fail the caller
                log.debug("watch: closing: %s", exc)


def _discard(response: Any) -> None:
    """A stream left half-read must never go back to the pool: the next request on its
    connection would read the rest of the watch as its answer."""
    try:
        response.close()
    finally:
        response.release_conn()


def watch_timeout(until: float, clock: Callable[[], float] = time.monotonic) -> int:
    """The server-side timeout of one watch request: whole seconds, at least one."""
    return max(1, min(WATCH_SECONDS, int(until - clock()) + 1))


def node_watcher(api: Any, node: str, handle: Callable[[WatchEvent], bool],
                 broken: Callable[[str], None], until: float) -> Watcher:
    """A Watcher of one node (by name) through the official client's CoreV1Api."""
    selector = f"metadata.name={node}"

    def open_watch(version: str) -> Any:
        return api.list_node(field_selector=selector, watch=True, resource_version=version,
                             allow_watch_bookmarks=True, timeout_seconds=watch_timeout(until),
                             _preload_content=False,
                             _request_timeout=(CONNECT_TIMEOUT, WATCH_SECONDS + 15))

    def relist() -> tuple[list[dict[str, Any]], str]:
        return _raw_list(api.list_node, selector)

    return Watcher(open_watch, relist, handle, broken)


def pods_watcher(api: Any, node: str, handle: Callable[[WatchEvent], bool],
                 broken: Callable[[str], None], until: float) -> Watcher:
    """A Watcher of the pods bound to a node."""
    selector = f"spec.nodeName={node}"

    def open_watch(version: str) -> Any:
        return api.list_pod_for_all_namespaces(
            field_selector=selector, watch=True, resource_version=version,
            allow_watch_bookmarks=True, timeout_seconds=watch_timeout(until),
            _preload_content=False, _request_timeout=(CONNECT_TIMEOUT, WATCH_SECONDS + 15))

    def relist() -> tuple[list[dict[str, Any]], str]:
        return _raw_list(api.list_pod_for_all_namespaces, selector)

    return Watcher(open_watch, relist, handle, broken)


def _raw_list(method: Callable[..., Any], selector: str) -> tuple[list[dict[str, Any]], str]:
    response = method(field_selector=selector, _preload_content=False,
                      _request_timeout=(CONNECT_TIMEOUT, 10.0))
    try:
        data = response.data
    finally:
        response.release_conn()
    try:
        listing = json.loads(data)
    except ValueError:
        raise WatchBroken("the list is not JSON") from None
    items, version = api_shape.listing(listing, f"the list of {selector}")
    return [i for i in items if isinstance(i, dict)], version
