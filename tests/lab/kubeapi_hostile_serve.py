"""Hostile answers a front end of the lab's Kubernetes API stand-in serves itself: slow,
endless and huge ones (and every readyz fault), as kubeapi_hostile.py describes.
Standard library only (runs on a lab host's system Python).
"""

from __future__ import annotations

import copy
import itertools
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

from kubeapi_hostile import shape
from kubeapi_store import Obj
from kubeapi_watch import client_gone

PAD_KEY = "lab.cargoship.io/padding"
_MARK = "LAB-HOSTILE-PADDING-MARK"
PIECE = 1 << 20  # bytes per write of a huge or endless answer


class _Gone(Exception):
    """The client left, the server is stopping, or the fault's time is up."""


class _Out:
    """Writes to the client under the fault's deadline, plain or chunked."""

    def __init__(self, handler: Any, seconds: float, closing: threading.Event):
        self.handler, self.closing = handler, closing
        self.deadline = time.monotonic() + seconds
        self.chunked = False

    def _timed(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0 or self.closing.is_set():
            raise _Gone()
        self.handler.connection.settimeout(left)

    def head(self, code: int, ctype: str, length: int | None) -> None:
        self._timed()
        self.handler.send_response(code)
        self.handler.send_header("Content-Type", ctype)
        if length is None:
            self.chunked = True
            self.handler.send_header("Transfer-Encoding", "chunked")
        else:
            self.handler.send_header("Content-Length", str(length))
        self.handler.end_headers()
        self.handler.wfile.flush()

    def send(self, data: bytes) -> None:
        if not data:
            return
        self._timed()
        self.handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if self.chunked
                                 else data)
        self.handler.wfile.flush()

    def end(self) -> None:
        self._timed()
        if self.chunked:
            self.handler.wfile.write(b"0\r\n\r\n")
        self.handler.wfile.flush()
        self.handler.connection.settimeout(None)

    def pause(self, seconds: float) -> None:
        self.closing.wait(max(0.0, min(seconds, self.deadline - time.monotonic())))
        if client_gone(self.handler.connection):
            raise _Gone()
        self._timed()


def serve(handler: Any, fault: Obj, answer: bytes | Obj, closing: threading.Event) -> None:
    """Answer the handler's request as the fault says (the datastore's real answer given),
    never raising for a client that went away."""
    params, kind, mode = fault.get("params") or {}, fault["kind"], fault["mode"]
    real = answer if isinstance(answer, dict) else json.loads(answer or b"null")
    out = _Out(handler, float(params.get("for_seconds", 300)), closing)
    text = kind == "readyz"
    ctype = str(real.get("content_type")) if text else "application/json"
    try:
        if mode == "shape":  # readyz only: the datastore shapes the others itself
            real = shape(real, params)
            body = real.get("body", "")
            data = (body if isinstance(body, str) else json.dumps(body)).encode()
            out.head(int(real.get("code", 200)), str(real.get("content_type")), len(data))
            out.send(data)
            out.end()
            return
        if mode == "slow":
            declared = int(params.get("declared", 100_000_000))
            out.head(200, ctype, declared)
            for sent in range(declared):
                out.send(b"[" if text and not sent else b"{" if not sent else b" ")
                out.pause(float(params.get("interval", 2)))
            raise _Gone()  # all `declared` bytes dripped: still nothing to parse
        elif mode == "endless":
            _endless(out, _prefix(kind, real), float(params.get("rate", 1_000_000)), ctype)
        else:
            size = int(params.get("bytes", 1 << 30))
            total, pieces = _huge(kind, real, size, fault.get("request_node") or "",
                                  params.get("fill"))
            out.head(200, ctype, None if kind.startswith("watch-") else total)
            for piece in pieces:
                out.send(piece)
            out.end()
            return
    except (_Gone, OSError, ValueError):  # ValueError: a write to a closed socket file
        pass
    handler.close_connection = True


def _endless(out: _Out, prefix: bytes, rate: float, ctype: str) -> None:
    out.head(200, ctype, None)
    out.send(prefix)
    started, sent = time.monotonic(), 0
    while True:
        due = int(rate * (time.monotonic() - started)) - sent
        if due > 0:
            out.send(b" " * min(due, PIECE))
            sent += min(due, PIECE)
        out.pause(0.05 if due < PIECE else 0)


def _prefix(kind: str, real: Any) -> bytes:
    """The start of a plausible answer, before the blanks of an endless one."""
    if kind == "readyz":
        return b"[+]ping ok\n"
    if kind.startswith("watch-"):
        return b'{"type": "ADDED", "object": '
    head = {k: real[k] for k in ("kind", "apiVersion") if isinstance(real, dict) and k in real}
    if kind.startswith("list-"):
        return json.dumps({**head, "metadata": real.get("metadata", {}),
                           "items": []}).encode()[:-2]
    return json.dumps(head).encode()[:-1] + (b', ' if head else b"") + b'"metadata": '


def _filler(count: int, pattern: bytes = b"x") -> Iterator[bytes]:
    block = (pattern * (PIECE // len(pattern) + 1))[:PIECE]
    while count > 0:
        piece = block if count >= len(block) else block[:count]
        count -= len(piece)
        yield piece


def _mark(obj: Any) -> Any:
    """obj (a dict) with the padding annotation's value set to the mark."""
    if not isinstance(obj, dict):
        obj = {"value": obj}
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = obj["metadata"] = {}
    annotations = meta.get("annotations")
    if not isinstance(annotations, dict):
        annotations = meta["annotations"] = {}
    annotations[PAD_KEY] = _MARK
    return obj


def _padded(text: bytes, size: int) -> tuple[int, Iterator[bytes]]:
    """`text` (holding the mark once) with the mark grown to make it `size` bytes long."""
    head, tail = text.split(_MARK.encode(), 1)
    fill = max(0, size - len(head) - len(tail))
    return len(head) + fill + len(tail), itertools.chain([head], _filler(fill), [tail])


def _huge(kind: str, real: Any, size: int, node: str,
          fill: str | None) -> tuple[int, Iterator[bytes]]:
    """The complete answer of `size` bytes: (its length, its pieces)."""
    if kind == "readyz":
        body = str(real.get("body", "")).encode()
        pad = max(0, size - len(body))
        return pad + len(body), itertools.chain(_filler(pad, b"[+]lab-padding ok\n"), [body])
    real = copy.deepcopy(real)
    if kind.startswith("watch-"):
        items = real.get("items") or []
        obj = {"kind": "Pod" if kind == "watch-pods" else "Node", "apiVersion": "v1",
               **(items[0] if items else pod(node, 0) if kind == "watch-pods"
                  else {"metadata": {"name": node or "lab-huge"}})}
        text = json.dumps({"type": "ADDED", "object": _mark(obj)}).encode() + b"\n"
        return _padded(text, size)
    if kind == "list-pods" and fill != "annotation":
        return _pod_list(real, node, size)
    if kind.startswith("list-"):
        items = real.get("items")
        if isinstance(items, list) and items:
            items[0] = _mark(items[0])
        else:
            real = _mark(real)
        return _padded(json.dumps(real).encode(), size)
    return _padded(json.dumps(_mark(real)).encode(), size)


def pod(node: str, number: int | str) -> Obj:
    """A running pod of a ReplicaSet, bound to `node`: what a busy node's list holds."""
    n = number if isinstance(number, str) else f"{number:012d}"
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {"metadata": {
        "name": f"lab-huge-{n}", "generateName": "lab-huge-", "namespace": "lab-huge",
        "uid": f"6c616268-7567-4565-8000-{n}", "resourceVersion": "1",
        "creationTimestamp": now, "labels": {"app": "lab-huge", "pod-template-hash": "6d4c"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                             "name": "lab-huge-6d4c", "uid": "6c616268-7567-4565-8000-"
                             "000000000000", "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"nodeName": node, "restartPolicy": "Always", "schedulerName":
                 "default-scheduler", "terminationGracePeriodSeconds": 30, "containers": [
                     {"name": "main", "image": "mirror.lab.internal:5000/library/pause:3.9",
                      "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                      "terminationMessagePath": "/dev/termination-log",
                      "imagePullPolicy": "IfNotPresent"}]},
        "status": {"phase": "Running", "podIP": "10.42.0.10", "startTime": now,
                   "conditions": [{"type": "Ready", "status": "True",
                                   "lastTransitionTime": now}]}}


def _pod_list(real: Obj, node: str, size: int) -> tuple[int, Iterator[bytes]]:
    """The real PodList, then generated pods bound to the node, then blanks to the size."""
    items = real.get("items") or []
    envelope = {k: v for k, v in real.items() if k != "items"}
    head = json.dumps({**envelope, "items": []}).encode()[:-2] + b", ".join(
        json.dumps(i).encode() for i in items)
    tail = b"]}"
    parts = json.dumps(pod(node, "#NUMBER#")).encode().split(b"#NUMBER#")
    each = sum(map(len, parts)) + 12 * (len(parts) - 1)
    budget = size - len(head) - len(tail)
    first = each + (2 if items else 0)
    count = 0 if budget < first else 1 + (budget - first) // (each + 2)
    used = 0 if not count else first + (count - 1) * (each + 2)
    blanks = max(0, budget - used)

    def pieces() -> Iterator[bytes]:
        yield head
        for start in range(0, count, 500):
            yield b"".join((b", " if i or items else b"") + (b"%012d" % i).join(parts)
                           for i in range(start, min(count, start + 500)))
        yield from _filler(blanks, b" ")
        yield tail

    return len(head) + used + blanks + len(tail), pieces()
