"""Injected faults of the lab's Kubernetes API stand-in: error statuses, and hostile answers.

Two sorts of fault live in the datastore (kubeapi.py without --upstream), posted to the
lab-only endpoint /lab/v1/faults (POST adds one, GET lists them, DELETE removes them all):

- An error (the original sort, no "kind"): {"method", "path", "match", "code", "times"
  (default 1), "reason", "message"}: the next matching request, whoever sends it, is
  refused with that status.
- A hostile answer: {"kind", "mode", "node", "times", "params"}. It only meets requests
  that come through a controller's API server (a front end): the lab's own view (Lab.api,
  the engines' kubelets, which talk to the datastore directly) stays truthful. `times`
  null: every matching request until the faults are cleared.

Kinds (by method, path and query) and the node each one names:

    read-node    GET   /api/v1/nodes/NAME              NAME
    patch-node   PATCH /api/v1/nodes/NAME              NAME
    list-nodes   GET   /api/v1/nodes                   fieldSelector metadata.name=N
    watch-nodes  GET   /api/v1/nodes?watch=1           fieldSelector metadata.name=N
    list-pods    GET   [/api/v1/namespaces/NS]/pods    fieldSelector spec.nodeName=N
    watch-pods   GET   [...]/pods?watch=1              fieldSelector spec.nodeName=N
    evict        POST  .../pods/NAME/eviction          the pod's spec.nodeName
    readyz       GET   /readyz on a front end          the front end's --node-name
                   (not from 127.0.0.1: the engine's own wait for its API server)

A fault with a node meets only requests that name that node (a list without the selector
does not); without one, every request of its kind.

How a front end learns of a fault: one that serves from its own etcd member asks the
datastore for it (POST /lab/v1/faults/take, with X-Lab-Front-End: its node name) and then
answers as the datastore would below, itself; one that forwards (an external datastore)
forwards every request with the header X-Lab-Front-End, and its /readyz etcd check (GET
/version) with X-Lab-Check: readyz too. The datastore takes the first matching fault
(using up one of its times), computes the real answer (a patch or an eviction really
happens, unless params.write is false), then:

- shape: changes that answer itself and sends it (a watch: each event as it streams), so
  the front end relays it as any answer; everything not set keeps following the store.
- slow, endless, huge (and every readyz fault): sends the real answer with the header
  X-Lab-Hostile (the fault, JSON). The front end then serves the hostile answer itself
  (kubeapi_hostile_serve.serve), straight onto its client's TLS connection: a drip
  reaches the client as a drip, and nothing big is ever held whole (huge is generated
  piece by piece). A watch that meets such a fault gets the List as its real answer.

Faults live in the datastore's memory: a restart of the datastore forgets them.

Modes and their params:

- shape: `set` {path: JSON value}, `unset` [path], `retime` {path: strftime format, or
  {"format": ..., "shift": seconds}}: the real RFC 3339 time there, shifted, rewritten
  in that format (UTC; "epoch": an integer), so it keeps moving with the real one (e.g.
  {"status.conditions[type=Ready].lastHeartbeatTime": "%Y-%m-%dT%H:%M:%S+00:00"}).
  Applied to the answer object; for a list to each item, for a watch to each event's
  object. A path starting with "$" applies to the whole answer instead (the List, the
  watch event; "$" alone replaces it). Path syntax: dotted keys, `\\.` a literal dot in
  a key; an integer segment indexes a list (-1 the last); `key[field=value]` the first
  list element whose field equals value. `set` creates missing dict keys; a missing list
  element leaves the answer as it is. Examples: "status",
  "status.conditions.0.lastHeartbeatTime", "metadata.annotations.a\\.io/b",
  "status.conditions[type=Ready].lastHeartbeatTime" (the Ready heartbeat; the rest of
  the condition keeps following the node). readyz's answer, for shape, is
  {"code": 200 or 500, "content_type": "text/plain; charset=utf-8", "body": "ok\\n"}.
- slow: `declared` (Content-Length, default 100_000_000), `interval` (seconds per byte,
  default 2), `for_seconds` (default 300): "{" then blanks, one byte at a time, then the
  connection closes.
- endless: `rate` (bytes/s, default 1_000_000), `for_seconds` (default 300): chunked, a
  JSON prefix (for a watch: one event's beginning) then blanks, then the connection closes.
- huge: `bytes` (default 1 GiB), `for_seconds` (default 300): a complete, valid answer of
  exactly that size (or the real answer's, if larger): the object with a padding
  annotation; list-pods: the real pods then generated running pods bound to the node
  (`fill`: "annotation" pads instead); a watch: one event line of that size.

Every mode writes with a deadline (a client that stops reading cannot hold a thread past
for_seconds), stops when the client goes away or the server shuts down, and runs in its
own request thread. Standard library only (runs on a lab host's system Python).
"""

from __future__ import annotations

import calendar
import copy
import json
import re
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from kubeapi_store import PODS, ApiError, Kind, Obj, Store, bad_request

KINDS = ("read-node", "list-nodes", "watch-nodes", "list-pods", "watch-pods", "patch-node",
         "evict", "readyz")
MODES = ("shape", "slow", "endless", "huge")
FRONT_END = "X-Lab-Front-End"  # request: sent through a front end (value: its node name)
CHECK = "X-Lab-Check"  # request: "readyz" on the front end's etcd check
HOSTILE = "X-Lab-Hostile"  # response: the fault the front end serves itself


# --- the faults ---------------------------------------------------------------------

class Faults:
    """The datastore's injected faults, in the order they were added."""

    def __init__(self) -> None:
        self.items: list[Obj] = []
        self.lock = threading.Lock()

    def add(self, fault: Any) -> None:
        if not isinstance(fault, dict):
            raise bad_request("a fault is a JSON object")
        if "kind" in fault:
            fault = _checked(fault)
        with self.lock:
            self.items.append(fault)

    def clear(self) -> int:
        with self.lock:
            count = len(self.items)
            self.items.clear()
            return count

    def listing(self) -> list[Obj]:
        with self.lock:
            return copy.deepcopy(self.items)

    def _use(self, fault: Obj, default_times: int | None) -> None:
        times = fault.get("times", default_times)
        fault["used"] = fault.get("used", 0) + 1
        if times is not None:
            fault["times"] = int(times) - 1
            if fault["times"] <= 0:
                self.items.remove(fault)

    def take_error(self, method: str, path: str, payload: Any) -> Obj | None:
        """The first error fault matching this request, used up once."""
        with self.lock:
            for fault in self.items:
                if "kind" not in fault and fault.get("method", method) == method and \
                        fault.get("path", path) == path and \
                        _contains(payload, fault.get("match") or {}):
                    self._use(fault, 1)
                    return fault
        return None

    def take_hostile(self, method: str, path: str, query: dict[str, str],
                     headers: Any, store: Store | None) -> Obj | None:
        """The hostile fault for a request a front end forwarded (None: not forwarded, or
        none matches), with the request's kind and node added."""
        via = headers.get(FRONT_END)
        if via is None or not self.items:  # (most requests: no faults at all)
            return None
        if headers.get(CHECK) == "readyz":
            kind, node = "readyz", via or None
        else:
            found = classify(method, path, query, store)
            if found is None:
                return None
            kind, node = found
        with self.lock:
            for fault in self.items:
                if fault.get("kind") == kind and fault.get("node") in (None, node):
                    self._use(fault, None)
                    return {**copy.deepcopy(fault), "request_node": node}
        return None


def faults_endpoint(faults: Faults, method: str, body: bytes) -> tuple[int, Obj]:
    """/lab/v1/faults on the datastore: POST adds one, GET lists them, DELETE clears."""
    if method == "POST":
        try:
            fault = json.loads(body)
        except ValueError as exc:
            raise bad_request(f"json parse error: {exc}") from None
        faults.add(fault)
        return 201, {"kind": "Status", "status": "Success"}
    if method == "DELETE":
        return 200, {"kind": "Status", "status": "Success",
                     "details": {"removed": faults.clear()}}
    if method == "GET":
        return 200, {"kind": "FaultList", "items": faults.listing()}
    raise ApiError(405, "MethodNotAllowed", "GET, POST or DELETE")


def unwritten(store: Store | None, fault: Obj, kind: Kind, ns: str | None,
              name: str | None) -> tuple[int, Obj]:
    """The real answer to a patch or an eviction a fault with params.write false keeps from
    happening: the object as it stands, or the eviction's Success."""
    assert store is not None
    if fault["kind"] == "patch-node" and name is not None:
        return 200, store.get(kind, ns or "", name)
    return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}


def _checked(fault: Obj) -> Obj:
    kind, mode, params = fault.get("kind"), fault.get("mode"), fault.get("params") or {}
    if kind not in KINDS:
        raise bad_request(f"unknown fault kind {kind!r} (known: {', '.join(KINDS)})")
    if mode not in MODES:
        raise bad_request(f"unknown fault mode {mode!r} (known: {', '.join(MODES)})")
    times = fault.get("times")
    if times is not None and (not isinstance(times, int) or isinstance(times, bool)
                              or times < 1):
        raise bad_request(f"times must be a positive integer or null, not {times!r}")
    node = fault.get("node")
    if node is not None and not isinstance(node, str):
        raise bad_request("node must be a string or null")
    if not isinstance(params, dict):
        raise bad_request("params must be an object")
    if not isinstance(params.get("set", {}), dict) or not isinstance(
            params.get("unset", []), list) or not isinstance(params.get("retime", {}), dict):
        raise bad_request("params.set and params.retime must be objects, params.unset a list")
    if not all(isinstance(v, str) or (isinstance(v, dict) and isinstance(
            v.get("format", ""), str) and isinstance(v.get("shift", 0), int | float))
            for v in params.get("retime", {}).values()):
        raise bad_request("a params.retime value is a format or {format, shift}")
    for name in ("declared", "interval", "for_seconds", "rate", "bytes"):
        value = params.get(name, 1)
        if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
            raise bad_request(f"params.{name} must be a non-negative number")
    return {"kind": kind, "mode": mode, "node": node, "times": times, "params": params}


def _contains(payload: Any, match: Any) -> bool:
    if isinstance(match, dict):
        return isinstance(payload, dict) and all(
            k in payload and _contains(payload[k], v) for k, v in match.items())
    return bool(payload == match)


def _field(query: dict[str, str], name: str) -> str | None:
    for term in query.get("fieldSelector", "").split(","):
        for op in ("==", "="):
            if term.strip().startswith(name + op):
                return term.strip()[len(name + op):]
    return None


def classify(method: str, path: str, query: dict[str, str],
             store: Store | None) -> tuple[str, str | None] | None:
    """(kind, the node the request names) of a forwarded API request, None for others."""
    path = path.rstrip("/")
    watch = query.get("watch", "").lower() in ("1", "true")
    if m := re.fullmatch(r"/api/v1/nodes/([^/]+)", path):
        kind = {"GET": "read-node", "PATCH": "patch-node"}.get(method)
        return (kind, unquote(m[1])) if kind else None
    if method == "GET" and path == "/api/v1/nodes":
        return "watch-nodes" if watch else "list-nodes", _field(query, "metadata.name")
    if method == "GET" and re.fullmatch(r"/api/v1(/namespaces/[^/]+)?/pods", path):
        return "watch-pods" if watch else "list-pods", _field(query, "spec.nodeName")
    if method == "POST" and (m := re.fullmatch(
            r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction", path)):
        try:
            pod = store.get(PODS, unquote(m[1]), unquote(m[2])) if store else {}
        except ApiError:
            pod = {}
        return "evict", (pod.get("spec") or {}).get("nodeName")
    return None


# --- shape: changing an answer ------------------------------------------------------

Step = str | int | tuple[str, str]


def steps(path: str) -> list[Step]:
    """A `set` path as steps: keys, list indexes, (field, value) list selectors."""
    out: list[Step] = []
    for raw in re.split(r"(?<!\\)\.", path) if path else []:
        segment = raw.replace("\\.", ".")
        m = re.fullmatch(r"(.*?)((?:\[[^\]=]+=[^\]]*\])*)", segment)
        assert m is not None  # the pattern matches any string
        if m[1]:
            out.append(int(m[1]) if re.fullmatch(r"-?\d+", m[1]) else m[1])
        out.extend(re.findall(r"\[([^\]=]+)=([^\]]*)\]", m[2]))
    return out


def _slot(node: Any, step: Step) -> Any:
    """The key or index `step` names in `node`; None when there is none."""
    if isinstance(node, dict) and not isinstance(step, tuple):
        return str(step)
    if isinstance(node, list) and isinstance(step, int):
        return step if -len(node) <= step < len(node) else None
    if isinstance(node, list) and isinstance(step, tuple):
        return next((i for i, item in enumerate(node) if isinstance(item, dict)
                     and str(item.get(step[0])) == step[1]), None)
    return None


_MISSING = object()  # no value there; returned by a change: remove it


def update(root: Any, path: str, change: Callable[[Any], Any], create: bool) -> Any:
    """`root` with the value at `path` replaced by change(old value or _MISSING) (removed
    when that is _MISSING); missing dict keys on the way are made only when `create`."""
    todo = steps(path)
    if not todo:
        new = change(root)
        return None if new is _MISSING else new
    node = root
    for i, step in enumerate(todo):
        slot = _slot(node, step)
        if slot is None:
            return root
        if i < len(todo) - 1:
            if isinstance(node, dict) and not isinstance(node.get(slot), dict | list):
                if not create:
                    return root
                node[slot] = {}
            node = node[slot]
            continue
        old = node[slot] if isinstance(node, list) or slot in node else _MISSING
        new = change(old)
        if new is not _MISSING:
            node[slot] = new
        elif old is not _MISSING:
            del node[slot]
    return root


def _retime(spec: Any) -> Callable[[Any], Any]:
    """A real RFC 3339 time (e.g. a heartbeat) shifted by `shift` seconds and written in
    `format` (strftime, UTC; "epoch": an integer); anything else is left as it is."""
    fmt, shift = (spec, 0) if isinstance(spec, str) else (
        spec.get("format", "%Y-%m-%dT%H:%M:%SZ"), spec.get("shift", 0))

    def change(old: Any) -> Any:
        try:
            wall = calendar.timegm(time.strptime(old, "%Y-%m-%dT%H:%M:%SZ")) + shift
        except (TypeError, ValueError):
            return old
        return int(wall) if fmt == "epoch" else time.strftime(fmt, time.gmtime(wall))

    return change


def _constant(value: Any) -> Callable[[Any], Any]:
    """A change that sets a copy of `value`, whatever was there."""
    return lambda _: copy.deepcopy(value)


def shape(answer: Any, params: Obj, event: bool = False) -> Any:
    """The answer changed by params.set/unset/retime: paths apply to each item of a List,
    to the object of a watch event, to the answer itself otherwise; "$..." to the whole."""
    answer = copy.deepcopy(answer)
    changes: list[tuple[str, Callable[[Any], Any], bool]] = [
        (p, _constant(v), True) for p, v in (params.get("set") or {}).items()]
    changes += [(p, lambda _: _MISSING, False) for p in params.get("unset") or []]
    changes += [(p, _retime(v), False) for p, v in (params.get("retime") or {}).items()]
    for path, change, create in changes:
        if path.startswith("$"):
            answer = update(answer, path[1:].lstrip("."), change, create)
        elif event and isinstance(answer, dict) and "object" in answer:
            answer["object"] = update(answer["object"], path, change, create)
        elif isinstance(answer, dict) and str(answer.get("kind", "")).endswith("List") \
                and isinstance(answer.get("items"), list):
            answer["items"] = [update(item, path, change, create) for item in answer["items"]]
        else:
            answer = update(answer, path, change, create)
    return answer


def datastore_answer(fault: Obj, obj: Any) -> tuple[Any, dict[str, str]]:
    """What the datastore sends for a hostile fault: the shaped answer, or the real one with
    the fault in a header for the front end."""
    if fault["mode"] == "shape" and fault["kind"] != "readyz":
        return shape(obj, fault["params"]), {}
    return obj, {HOSTILE: json.dumps(fault)}


def event_shaper(fault: Obj | None) -> Callable[[Obj], Obj] | None:
    if fault is None:
        return None
    return lambda event: shape(event, fault["params"], event=True)
