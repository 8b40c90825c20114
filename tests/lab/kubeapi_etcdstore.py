"""The lab API's objects kept in etcd, as kube-apiserver keeps them: each object a JSON value
under /registry/<resource>/<namespace>/<name> (staging/src/k8s.io/apiserver/pkg/storage/
etcd3/store.go; the real API stores protobuf and names nodes "minions", neither matters to
a client), its resourceVersion the key's mod_revision.

An EtcdStore is kubeapi_store.Store's semantics over a cache of the member(s) it is given,
as kube-apiserver's watch cache (storage/cacher) is over its etcd:

- the cache is loaded with one range and then fed by one watch of every key, so its
  resourceVersion is the member's revision and the watch history is the member's;
- a read of the latest state (a GET or list without resourceVersion) first asks the member
  for its revision through a quorum, then waits until the cache has it (kube-apiserver's
  consistent reads from cache: no quorum, no answer);
- a watch starts from what the cache has, with no quorum read, once the cache is ready
  (Cacher.Watch): loaded, and its watch of the member up (it requires a leader); until
  then the watch waits, up to its own timeout;
- a write is a transaction that compares the key's mod_revision with the one read
  (GuaranteedUpdate), retried on a conflict, answered once the cache has applied it.

An API server's member stopped, paused or cut off from a quorum leaves it unable to read
the latest state or write (503 "etcd unreachable"), while controllers with a quorum serve.
Standard library only (runs on a lab host's system Python).
"""

from __future__ import annotations

import base64
import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from kubeapi_etcd import EtcdUnavailable, Members, Watch
from kubeapi_store import KINDS, ApiError, Kind, Obj, Store, T, Write

PREFIX = "/registry/"
CONFLICT_RETRIES = 10  # GuaranteedUpdate tries again until it wins; a lab needs few
RECONNECT = 0.2  # seconds between a lost watch and the next try
PROBE_EVERY = 0.5  # seconds between the lab's own view's looks at its member
# The lab's own view gives each member this long before it asks the next (an API server
# has one member, and waits kubeapi_etcd.REQUEST_TIMEOUT for it).
VIEW_TIMEOUT = 1.0


def _key(kind: Kind, key: str) -> str:
    group = f"{kind.group}/" if kind.group else ""
    return f"{PREFIX}{group}{kind.resource}/{key.lstrip('/') if not kind.namespaced else key}"


def _kind_of(etcd_key: str) -> tuple[Kind, str] | None:
    """(kind, store key) of an etcd key this store writes; None for any other key."""
    if not etcd_key.startswith(PREFIX):
        return None
    rest = etcd_key[len(PREFIX):]
    for kind in KINDS.values():
        head = f"{kind.group}/{kind.resource}/" if kind.group else f"{kind.resource}/"
        if rest.startswith(head):
            name = rest[len(head):]
            return kind, name if kind.namespaced else f"/{name}"
    return None


class EtcdStore(Store):  # type: ignore[misc]  # (a sibling: Any to mypy)
    def __init__(self, stale_after: float, members: Members, kubelets: bool) -> None:
        super().__init__(stale_after, kubelets=kubelets)
        self.members = members
        self.loaded = False  # the cache holds the member's objects as of self.rv
        # Its watch of the member is up (created, and not ended since): the cache is
        # ready to serve watches, as the Cacher is between a list and its watch's end.
        self.watching = False
        self.cluster = ""  # the etcd cluster's id, as the load found it
        self._watch: Watch | None = None
        threading.Thread(target=self._follow, daemon=True, name="etcd-watch").start()
        if len(members.endpoints) > 1:
            threading.Thread(target=self._keep_up, daemon=True, name="etcd-probe").start()

    def close(self) -> None:
        super().close()
        watch = self._watch
        if watch is not None:
            watch.close()

    # -- the cache ----------------------------------------------------------------------

    def _follow(self) -> None:
        """Load the cache, then apply the member's watch; on any loss, start again from
        the revision applied (the history stays: nothing was missed)."""
        while not self.closed.is_set():
            endpoint = self.members.current
            try:
                if not self.loaded:
                    self._load()
                watch = Watch(endpoint, self.rv + 1)
                self._watch = watch
                if self.closed.is_set():
                    return
                for events in watch.messages():
                    self.watching = True
                    self._apply_events(events)
            except EtcdUnavailable:
                self.members.failed(endpoint)
            except Exception:  # a bug here must not leave the cache for ever behind
                traceback.print_exc(file=sys.stderr)
            self.watching = False
            self.closed.wait(RECONNECT)

    def _keep_up(self) -> None:
        """With several members (the lab's own view): notice a member that stopped
        answering, or a watch that fell silent, within about a second, rather than at the
        next request, and move the watch on to a member that answers."""
        while not self.closed.wait(PROBE_EVERY):
            try:
                self.sync()
            except OSError:
                pass
            if self.members.moved.is_set():
                self.members.moved.clear()
                watch = self._watch
                if watch is not None and watch.endpoint is not self.members.current:
                    watch.close()

    def _load(self) -> None:
        revision, self.cluster, kvs = self.members.load(PREFIX)
        with self.lock:
            for kv in kvs:
                found = _kind_of(_text(kv["key"]))
                obj = _decode(kv) if found is not None else None
                if found is not None and obj is not None:
                    kind, key = found
                    self.objects[kind.resource][key] = obj
                    if kind.resource == "nodes":
                        self.heartbeats[key.lstrip("/")] = time.monotonic()
                    elif kind.resource == "pods" and self.kubelets and \
                            obj["metadata"].get("deletionTimestamp"):
                        self._kubelet_deletes(key, obj)  # (it started going before us)
            self.rv = self.floor = revision
            self.loaded = True
            self.changed.notify_all()

    def _apply_events(self, events: list[dict[str, Any]]) -> None:
        with self.lock:
            for event in events:
                kv = event["kv"]
                revision = int(kv["mod_revision"])
                found = _kind_of(_text(kv["key"]))
                deleted = event.get("type") == "DELETE"
                obj = None if deleted else _decode(kv)
                if found is not None and (deleted or obj is not None):
                    kind, key = found
                    self._apply(kind, key, obj, revision)
                self.rv = max(self.rv, revision)
            self.changed.notify_all()

    def _caught_up(self, revision: int) -> None:
        """Wait until the cache has applied `revision`."""
        deadline = time.monotonic() + self.members.timeout
        with self.changed:
            while not (self.loaded and self.rv >= revision):
                left = deadline - time.monotonic()
                if left <= 0 or self.closed.is_set():
                    break
                self.changed.wait(left)
            else:
                return
        # The watch is stuck on a member that stopped answering: move it on.
        watch = self._watch
        if watch is not None:
            self.members.failed(watch.endpoint)
            watch.close()
        raise EtcdUnavailable(f"etcd: the watch cache is behind revision {revision}")

    def ready(self, within: float) -> bool:
        """Whether the cache is ready to serve a watch, waiting up to `within` seconds:
        loaded, and its watch of the member up. kube-apiserver's Cacher.Watch waits for
        its cache to be ready (staging/src/k8s.io/apiserver/pkg/storage/cacher/cacher.go,
        Watch: c.ready.waitAndReadGeneration); the cache is not ready from the end of its
        watch (a member that lost its leader ends it) until its next list. No quorum
        read: a watch starts from what the cache has (resourceVersion unset or 0) or waits
        for the version it asks for (kubeapi_watch.Watch._start)."""
        deadline = time.monotonic() + within
        with self.changed:
            while not (self.loaded and self.watching) and not self.closed.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(left)
        return True

    def sync(self) -> None:
        revision, cluster = self.members.revision()
        if self.loaded and (cluster != self.cluster or revision < self.rv):
            # A write may land between the read's answer and its arrival (the watch
            # brought it first), but a read begun after the cache had it cannot miss it:
            # a revision behind that one is another store where the member was (an
            # engine started on a new data dir makes one, with the same cluster id when
            # the members are named alike, and every object is gone). Nothing in this
            # cache holds: the process ends and its supervisor starts it afresh, as
            # kube-apiserver cannot follow its storage into another cluster either.
            seen = self.rv
            revision, cluster = self.members.revision()
            if cluster != self.cluster or revision < seen:
                sys.stderr.write(f"etcd: cluster {cluster} at revision {revision}, after "
                                 f"{self.cluster} at {seen}: another store; exiting\n")
                sys.stderr.flush()
                os._exit(1)
        self._caught_up(revision)

    # -- writes -------------------------------------------------------------------------

    def _transact(self, op: Callable[[], tuple[Write | None, Callable[[], T]]]) -> T:
        for _ in range(CONFLICT_RETRIES):
            self.sync()
            with self.lock:
                write, finish = op()
                if write is None:
                    return finish()
                expected = int(write.old["metadata"]["resourceVersion"]) \
                    if write.old is not None else 0
            value = None
            if write.new is not None:
                stored = json.loads(json.dumps(write.new))
                stored["metadata"].pop("resourceVersion", None)  # it is the mod_revision
                value = json.dumps(stored, separators=(",", ":")).encode()
            revision = self.members.txn(_key(write.kind, write.key), value, expected)
            if revision is None:
                continue  # written meanwhile: read it again and decide again
            self._caught_up(revision)
            with self.lock:
                if write.new is not None:
                    write.new["metadata"]["resourceVersion"] = str(revision)
                return finish()
        raise ApiError(409, "Conflict", "the object kept changing while it was written")


def _text(b64: str) -> str:
    return base64.b64decode(b64).decode(errors="replace")


def _decode(kv: dict[str, Any]) -> Obj | None:
    """The object a key holds; None for a value that is none (written by hand into etcd:
    kube-apiserver's cache cannot decode it either, and serves without it)."""
    try:
        obj = json.loads(base64.b64decode(kv.get("value") or ""))
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
        return None
    obj["metadata"]["resourceVersion"] = str(int(kv["mod_revision"]))
    return obj
