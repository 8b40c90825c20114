"""The key-value store under the lab's Kubernetes API stand-in: a controller's own etcd member,
as kube-apiserver uses it with `--etcd-servers=https://127.0.0.1:2379` (what rke2 and k3s
give it: the local member only), or, for a server run alone by the tests of the stand-in
itself, the same operations in this process's memory (MemoryKV).

Both offer what kube-apiserver's etcd3 store (staging/src/k8s.io/apiserver/pkg/storage/
etcd3/store.go) needs of etcd: a range (linearizable unless asked otherwise: a member
answers one only through a quorum, a ReadIndex from the leader), a transaction that
compares keys' mod_revision (its optimistic concurrency: create is "mod_revision == 0",
update and delete "mod_revision == the one read") and a watch from a revision with the
previous values (its cacher's reflector). Every answer carries the store's revision.

EtcdKV speaks etcd's JSON gateway (etcdserver/api/v3rpc through grpc-gateway: /v3/kv/range,
/v3/kv/txn, /v3/watch as a stream of JSON lines; keys and values base64) with the client
certificate the API server has (server/tls/etcd/client.crt), on kept-alive HTTPS
connections (a TLS handshake per request would cost this machine more than the request),
standard library only: it runs on a lab host's system Python.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

# kube-apiserver's --etcd-healthcheck-timeout and --etcd-readycheck-timeout default to 2 s.
CHECK_TIMEOUT = 2.0
# kube-apiserver gives a request up to its --request-timeout (60 s); a lab client must not
# hang that long: a read or write without a quorum fails in this many seconds.
REQUEST_TIMEOUT = 3.0
ALL = "\x00"  # a range or watch from key "\0" to "\0" covers every key


class EtcdUnavailable(OSError):
    """The member did not answer, or answered with an error (no leader, timed out)."""


class KV(NamedTuple):
    key: str
    value: bytes
    mod: int  # mod_revision
    create: int  # create_revision


class Change(NamedTuple):
    """One event of a watch: value None when the key was deleted; prev None when it was
    created (or the store no longer has it)."""

    key: str
    value: bytes | None
    mod: int
    prev: bytes | None


def prefix_end(prefix: str) -> str:
    """The range end that covers every key starting with `prefix` (clientv3.GetPrefixRangeEnd)."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8", "surrogateescape")).decode()


def _kv(raw: dict[str, Any]) -> KV:
    return KV(base64.b64decode(raw["key"]).decode(), base64.b64decode(raw.get("value", "")),
              int(raw.get("mod_revision", 0)), int(raw.get("create_revision", 0)))


class EtcdKV:
    """The controller's own member over its JSON gateway."""

    def __init__(self, url: str, ca: str | None = None, cert: str | None = None,
                 key: str | None = None) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 2379
        self.context: ssl.SSLContext | None = None
        if parts.scheme == "https":
            self.context = ssl.create_default_context(cafile=ca)
            if cert:
                self.context.load_cert_chain(cert, key)
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        if self.context is not None:
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout,
                                               context=self.context)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def call(self, path: str, body: dict[str, Any], timeout: float = REQUEST_TIMEOUT
             ) -> dict[str, Any]:
        """One gateway request on a kept-alive connection. A kept connection the member
        closed while idle (it restarted) fails before any answer: tried once more on a new
        one. EtcdUnavailable when it does not answer in `timeout` or answers an error."""
        data = json.dumps(body).encode()
        for attempt in (0, 1):
            with self._lock:
                conn = self._idle.pop() if self._idle and not attempt else None
            reused = conn is not None
            conn = conn or self._connect(timeout)
            try:
                if conn.sock is not None:
                    conn.sock.settimeout(timeout)
                else:
                    conn.timeout = timeout
                conn.request("POST", path, body=data,
                             headers={"Content-Type": "application/json"})
                response = conn.getresponse()
                raw = response.read()
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                if reused and isinstance(exc, (ConnectionResetError, BrokenPipeError,
                                               http.client.RemoteDisconnected)):
                    continue
                raise EtcdUnavailable(f"{type(exc).__name__}: {exc}".rstrip(": ")) from None
            if response.will_close:
                conn.close()
            else:
                with self._lock:
                    self._idle.append(conn)
            try:
                answer = json.loads(raw or b"{}")
            except ValueError:
                answer = {}
            if response.status != 200 or not isinstance(answer, dict) or "error" in answer:
                why = answer.get("error") or answer.get("message") if isinstance(
                    answer, dict) else None
                raise EtcdUnavailable(str(why or f"HTTP {response.status}")[:200])
            return answer
        raise AssertionError("unreachable")

    def range(self, key: str, end: str = "", *, limit: int = 0, keys_only: bool = False,
              serializable: bool = False, timeout: float = REQUEST_TIMEOUT
              ) -> tuple[int, list[KV]]:
        body: dict[str, Any] = {"key": _b64(key)}
        if end:
            body["range_end"] = _b64(end)
        if limit:
            body["limit"] = limit
        if keys_only:
            body["keys_only"] = True
        if serializable:
            body["serializable"] = True
        # A read is safe to send again: clientv3's retry interceptor does so on an
        # Unavailable error (no leader yet, a leader change, a member restarting) until the
        # request's deadline; so a brief election costs a read time, a lost quorum fails it.
        deadline = time.monotonic() + timeout
        pause = 0.02
        while True:
            try:
                answer = self.call("/v3/kv/range", body, max(0.1, deadline - time.monotonic()))
                break
            except EtcdUnavailable:
                if time.monotonic() + pause >= deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 0.5)
        return int(answer["header"]["revision"]), [_kv(k) for k in answer.get("kvs", [])]

    def txn(self, compares: list[tuple[str, int]], op: tuple[str, str, bytes],
            timeout: float = REQUEST_TIMEOUT) -> tuple[bool, int, KV | None]:
        """If every key's mod_revision is as given (0: absent), do op ("put", key, value)
        or ("delete", key, b""). (done, the store's revision, and when not done the first
        compared key as it is now: None if absent)."""
        kind, key, value = op
        request = {"request_put": {"key": _b64(key), "value": base64.b64encode(value).decode()}
                   } if kind == "put" else {"request_delete_range": {"key": _b64(key)}}
        answer = self.call("/v3/kv/txn", {
            "compare": [{"key": _b64(k), "target": "MOD", "result": "EQUAL",
                         "mod_revision": str(mod)} for k, mod in compares],
            "success": [request],
            "failure": [{"request_range": {"key": _b64(compares[0][0])}}]}, timeout)
        rev = int(answer["header"]["revision"])
        if answer.get("succeeded"):
            return True, rev, None
        found = (answer.get("responses") or [{}])[0].get("response_range", {}).get("kvs", [])
        return False, rev, _kv(found[0]) if found else None

    def check(self) -> None:
        """kube-apiserver's etcd readiness check (storagebackend/factory/etcd3.go,
        newETCD3Check): a linearizable Get of a key. EtcdUnavailable when it fails."""
        self.range("/registry/health", timeout=CHECK_TIMEOUT)

    def watch(self, start: int, closing: threading.Event) -> Iterator[tuple[int, list[Change]]]:
        """Every change from revision `start` on, every key, as (revision, changes); ends
        (EtcdUnavailable) when the member goes away. Its own connection: a stream."""
        conn = self._connect(REQUEST_TIMEOUT)
        try:
            conn.request("POST", "/v3/watch", body=json.dumps({"create_request": {
                "key": _b64(ALL), "range_end": _b64(ALL), "start_revision": str(start),
                "prev_kv": True, "progress_notify": True}}),
                headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            if response.status != 200:
                raise EtcdUnavailable(f"watch: HTTP {response.status}")
            assert conn.sock is not None
            # A quiet watch is normal; a member that stopped answering shows as a lost
            # connection (or a paused one: nothing, which consistent reads notice).
            conn.sock.settimeout(1.0)
            while not closing.is_set():
                try:
                    line = response.readline()
                except TimeoutError:
                    continue
                if not line:
                    raise EtcdUnavailable("the watch stream ended")
                message = json.loads(line).get("result") or {}
                if message.get("compact_revision") not in (None, "0"):
                    raise Compacted(int(message["compact_revision"]))
                changes = []
                for event in message.get("events") or []:
                    kv, prev = event["kv"], event.get("prev_kv")
                    deleted = event.get("type") == "DELETE"
                    changes.append(Change(
                        base64.b64decode(kv["key"]).decode(),
                        None if deleted else base64.b64decode(kv.get("value", "")),
                        int(kv.get("mod_revision", 0)),
                        base64.b64decode(prev.get("value", "")) if prev else None))
                if "header" in message:
                    yield int(message["header"]["revision"]), changes
        except (OSError, http.client.HTTPException, ValueError) as exc:
            if isinstance(exc, EtcdUnavailable):
                raise
            raise EtcdUnavailable(f"watch: {type(exc).__name__}: {exc}") from None
        finally:
            conn.close()


class Compacted(EtcdUnavailable):
    """The watch's start revision was compacted away: list again."""

    def __init__(self, revision: int) -> None:
        super().__init__(f"required revision has been compacted ({revision})")
        self.revision = revision


class MemoryKV:
    """The same operations in memory, for a stand-in run alone (no etcd): one revision
    counter, every change kept for watches. With a state file, the keys survive a restart
    (their revisions too); the change log does not."""

    def __init__(self, state_file: Path | None = None) -> None:
        self.lock = threading.Condition()
        self.rev = 1  # etcd's first revision is 1, its first write makes it 2
        self.keys: dict[str, KV] = {}
        self.log: list[tuple[int, list[Change]]] = []
        self.floor = 1  # changes after this revision are in the log
        self.state_file = state_file
        if state_file is not None and state_file.exists():
            state = json.loads(state_file.read_text())
            self.rev = self.floor = int(state["revision"])
            self.keys = {k: KV(k, base64.b64decode(v), mod, create)
                         for k, (v, mod, create) in state["keys"].items()}

    def _save(self) -> None:
        if self.state_file is None:
            return
        state = {"revision": self.rev, "keys": {
            k: [base64.b64encode(kv.value).decode(), kv.mod, kv.create]
            for k, kv in self.keys.items()}}
        tmp = self.state_file.with_name(self.state_file.name + ".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self.state_file)  # a server killed mid-write keeps the old state

    def range(self, key: str, end: str = "", *, limit: int = 0, keys_only: bool = False,
              serializable: bool = False, timeout: float = REQUEST_TIMEOUT
              ) -> tuple[int, list[KV]]:
        with self.lock:
            if not end:
                found = [self.keys[key]] if key in self.keys else []
            else:
                found = sorted((kv for k, kv in self.keys.items()
                                if key <= k and (end == ALL or k < end)), key=lambda kv: kv.key)
            return self.rev, found[:limit] if limit else found

    def txn(self, compares: list[tuple[str, int]], op: tuple[str, str, bytes],
            timeout: float = REQUEST_TIMEOUT) -> tuple[bool, int, KV | None]:
        with self.lock:
            for key, mod in compares:
                if (self.keys[key].mod if key in self.keys else 0) != mod:
                    return False, self.rev, self.keys.get(compares[0][0])
            kind, key, value = op
            prev = self.keys.get(key)
            if kind == "delete" and prev is None:
                return True, self.rev, None
            self.rev += 1
            if kind == "put":
                self.keys[key] = KV(key, value, self.rev, prev.create if prev else self.rev)
            else:
                del self.keys[key]
            self.log.append((self.rev, [Change(key, value if kind == "put" else None,
                                               self.rev, prev.value if prev else None)]))
            if len(self.log) > 10000:  # bounded, as etcd's history is by compaction
                self.floor = self.log[0][0]
                del self.log[:1000]
            self._save()
            self.lock.notify_all()
            return True, self.rev, None

    def check(self) -> None:
        return None

    def watch(self, start: int, closing: threading.Event) -> Iterator[tuple[int, list[Change]]]:
        pos = start - 1
        while not closing.is_set():
            with self.lock:
                if pos < self.floor - 1:
                    raise Compacted(self.floor)
                if self.rev <= pos:
                    self.lock.wait(1.0)
                # One log entry per revision, in order: the ones after `pos` are a slice.
                first = self.log[0][0] if self.log else self.rev + 1
                batch = self.log[max(0, pos + 1 - first):]
                now = self.rev
            yield from batch
            pos = max(pos, now)

    def wake(self) -> None:
        with self.lock:
            self.lock.notify_all()

