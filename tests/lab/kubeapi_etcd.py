"""A lab API server's own etcd member, as kube-apiserver uses it with
`--etcd-servers=https://127.0.0.1:2379` (what rke2 and k3s give it: the local member only).

kube-apiserver's readiness check of etcd (staging/src/k8s.io/apiserver/pkg/storage/
storagebackend/factory/etcd3.go, newETCD3Check) is a Get of a key: a linearizable read,
which the member can only answer through a quorum (a ReadIndex from the leader). Its
writes are raft proposals, committed only by a quorum. So a controller whose member is
stopped, paused or cut off from a quorum fails /readyz's etcd check and refuses writes
("etcdserver: request timed out" after its request timeout), while the others serve.

The lab's objects and their semantics (watches, selectors, evictions) stay in the one
datastore the front ends forward to; what a front end adds with --etcd-servers is the
quorum: every write is first committed through the controller's own member (the
request's path and body put under /registry/), and refused when that fails; every read of
the most recent state (no resourceVersion: a quorum read in kube-apiserver 1.30) is first
a linearizable read of that key, and refused when that fails. Reads at a resourceVersion
(0: "any", served from the watch cache) and watches are left alone.

Speaks etcd's JSON gateway (etcdserver/api/v3rpc via grpc-gateway: /v3/kv/range,
/v3/kv/put, base64 keys and values) with the client certificate the API server has
(server/tls/etcd/client.crt), standard library only.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import threading
from urllib.parse import urlsplit

# kube-apiserver's --etcd-healthcheck-timeout and --etcd-readycheck-timeout default to 2 s.
CHECK_TIMEOUT = 2.0
# Its requests wait longer (the etcd client's request timeout), but a lab client must not
# hang for long: a read or write without a quorum fails in this many seconds.
REQUEST_TIMEOUT = 3.0


# What a request on a kept connection meets when the member closed it: reset, a broken
# pipe, or a TLS connection that ended without its close_notify.
CLOSED = (ConnectionError, ssl.SSLEOFError, ssl.SSLZeroReturnError)


class EtcdUnavailable(OSError):
    pass


class LocalMember:
    def __init__(self, url: str, ca: str, cert: str, key: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 2379
        self.context = ssl.create_default_context(cafile=ca)
        self.context.load_cert_chain(cert, key)
        # Connections kept open between requests, as the API server's etcd client keeps
        # its gRPC connection: a TLS handshake per request was most of what a member cost
        # a lab (each API request asks the member once).
        self._idle: list[http.client.HTTPSConnection] = []
        self._lock = threading.Lock()

    def _connection(self, timeout: float) -> tuple[http.client.HTTPSConnection, bool]:
        """A connection, and whether it was kept from an earlier request."""
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout,
                                               context=self.context), False
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn, True

    def _exchange(self, path: str, body: dict[str, str], timeout: float
                  ) -> tuple[http.client.HTTPSConnection, http.client.HTTPResponse, bytes]:
        conn, kept = self._connection(timeout)
        try:
            conn.request("POST", path, body=json.dumps(body),
                         headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            return conn, response, response.read()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()  # a connection that failed is not used again
            if kept and isinstance(exc, CLOSED):
                # A kept connection the member closed (it restarted): asked again on a
                # new one, as etcd's client reconnects; a put asked twice is the same put.
                return self._exchange(path, body, timeout)
            raise EtcdUnavailable(f"{type(exc).__name__}: {exc}".rstrip(": ")) from None

    def _call(self, path: str, body: dict[str, str], timeout: float) -> dict[str, object]:
        conn, response, data = self._exchange(path, body, timeout)
        if response.will_close:
            conn.close()
        else:
            with self._lock:
                self._idle.append(conn)
        try:
            answer = json.loads(data or b"{}")
        except ValueError:
            answer = {}
        if response.status != 200 or "error" in answer:
            why = answer.get("error") or answer.get("message") or f"HTTP {response.status}"
            raise EtcdUnavailable(str(why)[:200])
        return answer if isinstance(answer, dict) else {}

    def check(self) -> tuple[bool, str]:
        """The readiness check: a linearizable read of /registry/health."""
        try:
            self._call("/v3/kv/range", {"key": _b64("/registry/health")}, CHECK_TIMEOUT)
        except EtcdUnavailable as exc:
            return False, f"etcd: {exc}"
        return True, ""

    def read(self, key: str) -> None:
        """A linearizable read of `key` (a ReadIndex through the leader): its answer is the
        datastore's; what it shows is that a quorum answered."""
        self._call("/v3/kv/range", {"key": _b64(key)}, REQUEST_TIMEOUT)

    def put(self, key: str, value: bytes) -> None:
        self._call("/v3/kv/put", {"key": _b64(key), "value": base64.b64encode(value).decode()},
                   REQUEST_TIMEOUT)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()
