"""The lab API's etcd client: a controller's API server uses its own member only, as
kube-apiserver does with `--etcd-servers=https://127.0.0.1:2379` (what rke2 and k3s give
it); the lab's own view (the datastore process, for the tests and the kubelets) uses every
member, the first that answers.

kube-apiserver's readiness check of etcd (staging/src/k8s.io/apiserver/pkg/storage/
storagebackend/factory/etcd3.go, newETCD3Check) is a Get of a key: a linearizable read,
which the member can only answer through a quorum (a ReadIndex from the leader). Its
writes are raft proposals, committed only by a quorum. So a controller whose member is
stopped, paused or cut off from a quorum fails /readyz's etcd check and refuses writes
("etcdserver: request timed out" after its request timeout), while the others serve.

Speaks etcd's JSON gateway (etcdserver/api/v3rpc via grpc-gateway: /v3/kv/range, /v3/kv/txn,
/v3/watch; base64 keys and values, int64 as strings) with a client certificate, standard
library only. kubeapi_etcdstore.py keeps the API's objects in it.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

# kube-apiserver's --etcd-healthcheck-timeout and --etcd-readycheck-timeout default to 2 s.
CHECK_TIMEOUT = 2.0
# Its requests wait longer (the etcd client's request timeout), but a lab client must not
# hang for long: a read or write without a quorum fails in this many seconds.
REQUEST_TIMEOUT = 3.0

# What a request on a kept connection meets when the member closed it: reset, a broken
# pipe, or a TLS connection that ended without its close_notify.
CLOSED = (ConnectionError, ssl.SSLEOFError, ssl.SSLZeroReturnError)


# A leader's hand-over answers the linearizable reads in flight "etcdserver: leader
# changed" (rpctypes.ErrGRPCLeaderChanged, codes.Unavailable). etcd's Go client repeats a
# read (Range is a "repeatable" request: client/v3/retry.go) that failed with
# codes.Unavailable, 25 ms apart (retry_interceptor.go, defaultBackoffWaitBetween), within
# the request's deadline; so kube-apiserver's GET never shows a hand-over. The lab repeats
# that answer alone: a member stopped or without a quorum still fails a read at once, where
# the real client would wait out its deadline (the tests of a lost member stay short).
HANDOVER = "leader changed"
RETRY_WAIT = 0.025


class EtcdUnavailable(OSError):
    pass


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def prefix_end(prefix: str) -> str:
    """The range end that makes a range of every key starting with `prefix` (etcd's
    clientv3.GetPrefixRangeEnd: the last byte plus one)."""
    raw = prefix.encode()
    return base64.b64encode(raw[:-1] + bytes([raw[-1] + 1])).decode()


class _Endpoint:
    """One member's client URL, with connections kept open between requests, as the API
    server's etcd client keeps its gRPC connection: a TLS handshake per request was most
    of what a member cost a lab."""

    def __init__(self, url: str, context: ssl.SSLContext) -> None:
        parts = urlsplit(url)
        self.url = url
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 2379
        self.context = context
        self._idle: list[http.client.HTTPSConnection] = []
        self._lock = threading.Lock()

    def connect(self, timeout: float | None) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self.host, self.port, timeout=timeout,
                                           context=self.context)

    def _connection(self, timeout: float) -> tuple[http.client.HTTPSConnection, bool]:
        """A connection, and whether it was kept from an earlier request."""
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            return self.connect(timeout), False
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn, True

    def call(self, path: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        conn, kept = self._connection(timeout)
        try:
            conn.request("POST", path, body=json.dumps(body),
                         headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()  # a connection that failed is not used again
            if kept and isinstance(exc, CLOSED):
                # A kept connection the member closed (it restarted): asked again on a
                # new one, as etcd's client reconnects. Every call here is safe to repeat
                # (a txn compares revisions, so it never applies twice).
                return self.call(path, body, timeout)
            raise EtcdUnavailable(f"{type(exc).__name__}: {exc}".rstrip(": ")) from None
        if response.will_close:
            conn.close()
        else:
            with self._lock:
                self._idle.append(conn)
        try:
            answer = json.loads(data or b"{}")
        except ValueError:
            answer = {}
        if response.status != 200 or not isinstance(answer, dict) or "error" in answer:
            why = (answer.get("error") or answer.get("message") if isinstance(answer, dict)
                   else None) or f"HTTP {response.status}"
            raise EtcdUnavailable(str(why)[:200])
        return answer


class Members:
    """An etcd client of `urls`: requests go to the one that answered last, and on to the
    next when it does not (an API server is given its local member alone)."""

    def __init__(self, urls: list[str], ca: str, cert: str, key: str,
                 timeout: float = REQUEST_TIMEOUT) -> None:
        context = ssl.create_default_context(cafile=ca)
        context.load_cert_chain(cert, key)
        self.endpoints = [_Endpoint(url, context) for url in urls]
        self.timeout = timeout  # per member: with several, a short one moves on sooner
        self._current = 0
        self.moved = threading.Event()  # set whenever requests move on to another member

    @property
    def current(self) -> _Endpoint:
        return self.endpoints[self._current]

    def failed(self, endpoint: _Endpoint) -> None:
        """Move on from `endpoint` (if it is still the current one)."""
        if self.endpoints[self._current] is endpoint:
            self._current = (self._current + 1) % len(self.endpoints)
            self.moved.set()

    def call(self, path: str, body: dict[str, Any], timeout: float | None = None
             ) -> dict[str, Any]:
        error = EtcdUnavailable("no etcd member")
        for _ in self.endpoints:
            endpoint = self.current
            try:
                return endpoint.call(path, body, timeout or self.timeout)
            except EtcdUnavailable as exc:
                error = exc
                self.failed(endpoint)
        raise error

    def read(self, body: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """A linearizable range, asked again while a leader's hand-over answers it (see
        HANDOVER), until `timeout`."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            try:
                return self.call("/v3/kv/range", body, timeout)
            except EtcdUnavailable as exc:
                if HANDOVER not in str(exc) or time.monotonic() + RETRY_WAIT > deadline:
                    raise
            time.sleep(RETRY_WAIT)

    def check(self) -> tuple[bool, str]:
        """The readiness check: a linearizable read of /registry/health."""
        try:
            self.read({"key": b64("/registry/health")}, CHECK_TIMEOUT)
        except EtcdUnavailable as exc:
            return False, f"etcd: {exc}"
        return True, ""

    def revision(self) -> tuple[int, str]:
        """The store's current revision through a quorum (a linearizable read), and the
        cluster's id."""
        answer = self.read({"key": b64("/registry/"), "range_end": prefix_end("/registry/"),
                            "count_only": True})
        return int(answer["header"]["revision"]), str(answer["header"].get("cluster_id"))

    def load(self, prefix: str) -> tuple[int, str, list[dict[str, Any]]]:
        """Every key under `prefix`, the revision they are at (linearizable), and the
        cluster's id."""
        answer = self.read({"key": b64(prefix), "range_end": prefix_end(prefix)})
        return int(answer["header"]["revision"]), str(answer["header"].get("cluster_id")), \
            list(answer.get("kvs") or [])

    def txn(self, key: str, value: bytes | None, mod_revision: int) -> int | None:
        """Put `value` at `key` (None: delete it) if the key was last written at
        `mod_revision` (0: it does not exist), as kube-apiserver's GuaranteedUpdate does;
        the revision of the write, or None when the key had moved on."""
        op: dict[str, Any] = {"request_delete_range": {"key": b64(key)}} if value is None \
            else {"request_put": {"key": b64(key), "value": base64.b64encode(value).decode()}}
        answer = self.call("/v3/kv/txn", {
            "compare": [{"key": b64(key), "target": "MOD", "result": "EQUAL",
                         "mod_revision": str(mod_revision)}],
            "success": [op]})
        if not answer.get("succeeded"):
            return None
        return int(answer["header"]["revision"])


class Watch:
    """A watch of every key from `start` on one member: each message's events, as the
    member sends them (a revision's events together; the first message, the watch's
    creation, has none). close() ends it from another thread.

    It requires a leader, as kube-apiserver's watches do (staging/src/k8s.io/apiserver/
    pkg/storage/etcd3/watcher.go: clientv3.WithRequireLeader): a member that has lost its
    leader cancels the watch ("etcdserver: no leader", etcd's v3rpc monitorLeader) and
    refuses a new one. The gateway passes the "hasleader" metadata on from a
    Grpc-Metadata- header (grpc-gateway's default header matcher)."""

    def __init__(self, endpoint: _Endpoint, start: int) -> None:
        self.endpoint = endpoint
        self.conn = endpoint.connect(REQUEST_TIMEOUT)
        self.start = start

    def messages(self) -> Iterator[list[dict[str, Any]]]:
        everything = base64.b64encode(b"\0").decode()  # key and range_end "\0": all keys
        try:
            self.conn.request("POST", "/v3/watch", body=json.dumps({"create_request": {
                "key": everything, "range_end": everything,
                "start_revision": str(self.start)}}),
                headers={"Content-Type": "application/json",
                         "Grpc-Metadata-hasleader": "true"})
            response = self.conn.getresponse()
            if response.status != 200:
                raise EtcdUnavailable(f"watch: HTTP {response.status}")
            assert self.conn.sock is not None
            self.conn.sock.settimeout(None)  # a quiet store sends nothing for long
            while line := response.readline():
                message = json.loads(line)
                result = message.get("result") or {}
                if "error" in message or result.get("canceled"):
                    raise EtcdUnavailable(f"watch: {message}"[:200])
                if result.get("events") or result.get("created"):
                    yield list(result.get("events") or [])
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise EtcdUnavailable(f"watch: {type(exc).__name__}: {exc}") from None
        finally:
            self.conn.close()
        raise EtcdUnavailable("watch: the member ended the stream")

    def close(self) -> None:
        sock = self.conn.sock
        if sock is not None:
            try:
                sock.shutdown(2)  # wakes the reader blocked on it
            except OSError:
                pass
