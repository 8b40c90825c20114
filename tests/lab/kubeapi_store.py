"""Objects and semantics of the lab's Kubernetes API stand-in; kubeapi.py serves them.

Nodes, pods and PodDisruptionBudgets in the real API's shapes, the eviction subresource, and
two controllers folded in because nothing else would run them: the node lifecycle controller
(a node with no status patch and no Lease renewal for `stale_after` seconds reads Ready
"Unknown", and a ticker
writes that into the stored node, as the real controller patches it) and the disruption
controller (a PDB's status is computed from the live pods on every read). Every write is
also an event in a bounded history, which watches (kubeapi_watch.py) stream from.
Standard library only: it runs on the lab host's system Python.
"""

from __future__ import annotations

import base64
import calendar
import copy
import functools
import json
import math
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

Obj = dict[str, Any]
# Kubelet-owned node conditions that the node lifecycle controller marks Unknown.
KUBELET_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
# Condition reasons the node lifecycle controller writes (not a kubelet's heartbeat).
CONTROLLER_REASONS = ("NodeStatusUnknown", "NodeStatusNeverUpdated")
HISTORY = 1000  # events kept for watches from a resourceVersion (the watch cache's window)
LIFECYCLE_TICK = 0.5  # seconds between the node lifecycle controller's passes
# Seconds between a kubelet's tries at deleting a terminated pod when a try found no
# quorum. The real one tries again at its status manager's next sync
# (kubernetes pkg/kubelet/status/status_manager.go: syncBatch every 10 s, and at once on
# each status update of the pod); a second keeps the tests of a lost member short.
KUBELET_RETRY = 1.0


T = TypeVar("T")


class Event(NamedTuple):
    """A write: the object as read after it (None: deleted) and before it (None: created)."""

    rv: int
    type: str  # ADDED, MODIFIED or DELETED
    resource: str
    obj: Obj | None
    prev: Obj | None


class Write(NamedTuple):
    """The one object an API call writes: `new` None deletes it, `old` None creates it."""

    kind: Kind
    key: str  # "namespace/name" ("/name" when cluster-scoped)
    new: Obj | None
    old: Obj | None


@dataclass(frozen=True)
class Kind:
    resource: str
    kind: str
    api_version: str
    namespaced: bool
    group: str = ""


NODES = Kind("nodes", "Node", "v1", namespaced=False)
PODS = Kind("pods", "Pod", "v1", namespaced=True)
PDBS = Kind("poddisruptionbudgets", "PodDisruptionBudget", "policy/v1", True, group="policy")
# k3s's and rke2's helm-controller CRD (k3s-io/helm-controller pkg/apis/helm.cattle.io/v1):
# what the deploy controller applies from a chart-values manifest.
HELM_CONFIGS = Kind("helmchartconfigs", "HelmChartConfig", "helm.cattle.io/v1", True,
                    group="helm.cattle.io")
# The kubelets' heartbeats: one Lease per node in kube-node-lease, named after it.
LEASES = Kind("leases", "Lease", "coordination.k8s.io/v1", True, group="coordination.k8s.io")
NODE_LEASES = "kube-node-lease"
KINDS = {(k.group, k.resource): k for k in (NODES, PODS, PDBS, HELM_CONFIGS, LEASES)}


class ApiError(Exception):
    """A refusal the real API would make; it is sent as a Status body."""

    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None):
        super().__init__(message)
        self.code, self.reason, self.details = code, reason, details

    def status(self) -> Obj:
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": str(self), "reason": self.reason, "code": self.code}
        if self.details is not None:
            body["details"] = self.details
        return body


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def _details(kind: Kind, name: str) -> Obj:
    return {"name": name, **({"group": kind.group} if kind.group else {}), "kind": kind.resource}


def _qualified(kind: Kind) -> str:
    return f"{kind.resource}.{kind.group}" if kind.group else kind.resource


def not_found(kind: Kind, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{_qualified(kind)} "{name}" not found',
                    _details(kind, name))


def invalid(kind: Kind, name: str, field: str, why: str) -> ApiError:
    cause = {"reason": "FieldValueInvalid", "message": why, "field": field}
    return ApiError(422, "Invalid", f'{kind.kind} "{name}" is invalid: {field}: {why}',
                    {"name": name, **({"group": kind.group} if kind.group else {}),
                     "kind": kind.kind, "causes": [cause]})


def rfc3339(wall: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall))


# --- selectors -------------------------------------------------------------------------

Requirement = tuple[str, str, frozenset[str]]  # key, op (= != in notin exists !), values
Patcher = Callable[[Obj], Obj]  # the stored object -> the patched one


def labels_match(labels: dict[str, str], reqs: list[Requirement]) -> bool:
    for key, op, values in reqs:
        has = key in labels
        if op in ("=", "in") and not (has and labels[key] in values):
            return False
        if op in ("!=", "notin") and has and labels[key] in values:
            return False
        if (op == "exists" and not has) or (op == "!" and has):
            return False
    return True


def pdb_requirements(selector: Obj | None) -> list[Requirement] | None:
    """A LabelSelector as requirements; None (no selector) selects nothing, {} everything."""
    if selector is None:
        return None
    reqs = [(k, "=", frozenset([v])) for k, v in (selector.get("matchLabels") or {}).items()]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for expr in selector.get("matchExpressions") or []:
        reqs.append((expr["key"], ops[expr["operator"]], frozenset(expr.get("values") or [])))
    return reqs


# --- the store -------------------------------------------------------------------------

class Store:
    """All objects behind one lock; keys are "namespace/name" ("/name" when cluster-scoped),
    so sorting them gives the real API's list order.

    Every API call is a transaction (_transact): under the lock it reads the objects and
    decides on at most one write, which is then committed and applied (_apply). This store
    commits in memory (the lab's own datastore: an external datastore's servers share it);
    kubeapi_etcdstore.EtcdStore commits to etcd and applies what the member's watch sends.
    """

    def __init__(self, stale_after: float, state_file: Path | None = None,
                 kubelets: bool = True):
        # `kubelets`: this store also does what the nodes' kubelets would (delete a
        # terminating pod once its grace period is over): the lab's own view does, so
        # that the deletion does not hang on one API server's member.
        self.kubelets = kubelets
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)  # notified on every recorded event
        self.stale_after, self.state_file = stale_after, state_file
        self.rv = 0
        self.history: deque[Event] = deque(maxlen=HISTORY)
        self.objects: dict[str, dict[str, Obj]] = {k.resource: {} for k in KINDS.values()}
        # Monotonic time at which each node's heartbeat was last seen to change, as the node
        # lifecycle controller keeps it (probeTimestamp). Not persisted: like that
        # controller after a restart, a loaded node gets a fresh grace period.
        self.heartbeats: dict[str, float] = {}
        if state_file and state_file.exists():
            state = json.loads(state_file.read_text())
            self.rv, self.objects = state["resourceVersion"], state["objects"]
            self.heartbeats = {n["metadata"]["name"]: time.monotonic()
                               for n in self.objects["nodes"].values()}
        self.floor = self.rv  # every change after this resourceVersion is in the history
        self.closed = threading.Event()

    def start(self) -> Store:
        if self.stale_after > 0:
            threading.Thread(target=self._lifecycle, daemon=True,
                             name="node-lifecycle").start()
        return self

    def close(self) -> None:
        self.closed.set()
        with self.changed:
            self.changed.notify_all()  # watches waiting for a change look at `closed` now

    # -- transactions -----------------------------------------------------------------

    def _transact(self, op: Callable[[], tuple[Write | None, Callable[[], T]]]) -> T:
        """Run `op` under the lock, commit its write, and return what its `finish` says
        (called under the lock, once the write is applied)."""
        with self.lock:
            write, finish = op()
            if write is not None:
                if write.new is not None:
                    write.new["metadata"]["resourceVersion"] = str(self.rv + 1)
                self._apply(write.kind, write.key, write.new, self.rv + 1)
                self._save()
            return finish()

    def _apply(self, kind: Kind, key: str, new: Obj | None, rv: int) -> None:
        """Under the lock: the write that took resourceVersion `rv` (new None: a delete)
        becomes the stored state and an event in the history."""
        store = self.objects[kind.resource]
        old = store.get(key)
        prev = self._view(kind, old) if old is not None else None  # before a heartbeat
        if kind is NODES:
            self._observe_heartbeat(key.partition("/")[2], new, old)
        elif kind is LEASES and key.startswith(NODE_LEASES + "/"):
            self._observe_lease(key.partition("/")[2], new, old)
        if kind is PODS and self.kubelets and new is not None and \
                new["metadata"].get("deletionTimestamp") and \
                not (old or {}).get("metadata", {}).get("deletionTimestamp"):
            self._kubelet_deletes(key, new)
        if new is None:
            store.pop(key, None)
        else:
            store[key] = new
        self.rv = rv
        if len(self.history) == self.history.maxlen:
            self.floor = self.history[0].rv  # about to be dropped: watches from before it 410
        kind_of_event = "DELETED" if new is None else "ADDED" if old is None else "MODIFIED"
        self.history.append(Event(rv, kind_of_event, kind.resource,
                                  self._view(kind, new) if new is not None else None, prev))
        self.changed.notify_all()

    def _kubelet_deletes(self, key: str, pod: Obj) -> None:
        """The pod's kubelet sees it terminating, gives its containers the grace period,
        then deletes it; seen late (this store's member was slow, or this store has just
        loaded it), no later than its deletionTimestamp (rounded up to the second when it
        was set)."""
        grace = float(pod["metadata"].get("deletionGracePeriodSeconds") or 0)
        try:
            until = calendar.timegm(time.strptime(pod["metadata"]["deletionTimestamp"],
                                                  "%Y-%m-%dT%H:%M:%SZ")) - time.time()
        except (TypeError, ValueError):
            until = grace
        timer = threading.Timer(max(0.0, min(grace, until)), self._terminated,
                                [*key.split("/", 1), pod["metadata"]["uid"]])
        timer.daemon = True
        timer.start()

    def _observe_heartbeat(self, name: str, new: Obj | None, old: Obj | None) -> None:
        """The node lifecycle controller's clock: a node is fresh from its creation and
        from each change of its conditions' lastHeartbeatTime or its Lease's renewTime
        (kubernetes pkg/controller/nodelifecycle/node_lifecycle_controller.go,
        tryUpdateNodeHealth: probeTimestamp moves when either does)."""
        if new is None:
            self.heartbeats.pop(name, None)
            return

        def beats(node: Obj | None) -> set[Any]:
            # The kubelet's own: the controller's Unknown keeps the time it last saw.
            return {c.get("lastHeartbeatTime") for c in
                    ((node or {}).get("status") or {}).get("conditions") or []
                    if isinstance(c, dict) and c.get("reason") not in CONTROLLER_REASONS}

        if old is None or beats(new) - beats(old):
            self.heartbeats[name] = time.monotonic()

    def _observe_lease(self, name: str, new: Obj | None, old: Obj | None) -> None:
        """The same clock moves when the node's Lease is renewed: a renewTime later than
        the one seen (tryUpdateNodeHealth: the observed lease's RenewTime after the saved
        one). A running kubelet posts its status only when it changes; the Lease is what
        keeps its node from reading Unknown."""
        def renewed(lease: Obj | None) -> Any:
            return ((lease or {}).get("spec") or {}).get("renewTime")

        # RFC 3339 with microseconds, as the kubelets write it: later is greater.
        if new is not None and name in self.heartbeats and renewed(new) and \
                str(renewed(new)) > str(renewed(old) or ""):
            self.heartbeats[name] = time.monotonic()

    def _save(self) -> None:
        if self.state_file is None:
            return
        # Temp file + rename: a server killed mid-write leaves the previous state intact.
        state = {"resourceVersion": self.rv, "objects": self.objects}
        tmp = self.state_file.with_name(self.state_file.name + ".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self.state_file)

    def _lifecycle(self) -> None:
        """The node lifecycle controller writes what _view shows of an overdue node, so a
        watch sees the transition as a change (a new resourceVersion), as for real."""
        while not self.closed.wait(LIFECYCLE_TICK):
            with self.lock:
                overdue = [key for key, node in self.objects["nodes"].items()
                           if self._view(NODES, node).get("status") != node.get("status")]
            for key in overdue:
                try:
                    self._transact(functools.partial(self._mark_unknown, key))
                except (ApiError, OSError):
                    pass  # another writer got there first, or no quorum: the next tick

    def _mark_unknown(self, key: str) -> tuple[Write | None, Callable[[], None]]:
        node = self.objects["nodes"].get(key)
        if node is None:
            return None, lambda: None
        view = self._view(NODES, node)
        if view.get("status") == node.get("status"):
            return None, lambda: None
        return Write(NODES, key, view, node), lambda: None

    # -- reading ------------------------------------------------------------------------

    def _find(self, kind: Kind, ns: str, name: str) -> Obj:
        obj = self.objects[kind.resource].get(f"{ns}/{name}")
        if obj is None:
            raise not_found(kind, name)
        return obj

    def _view(self, kind: Kind, obj: Obj) -> Obj:
        """What a client reads: stored object plus what the folded-in controllers write."""
        obj = copy.deepcopy(obj)
        if kind is NODES:
            self._node_lifecycle(obj)
        elif kind is PDBS:
            obj["status"] = self._pdb_status(obj)
        return obj

    def _node_lifecycle(self, node: Obj) -> None:
        last = self.heartbeats.get(node["metadata"]["name"], 0.0)
        overdue = time.monotonic() - last - self.stale_after
        if self.stale_after <= 0 or overdue <= 0:
            return
        since = rfc3339(time.time() - overdue)
        conditions = node.setdefault("status", {}).setdefault("conditions", [])
        if not any(c.get("type") == "Ready" for c in conditions):
            conditions.append({"type": "Ready", "status": "Unknown", "reason":
                               "NodeStatusNeverUpdated", "message": "Kubelet never posted "
                               "node status.", "lastTransitionTime": since,
                               "lastHeartbeatTime": node["metadata"]["creationTimestamp"]})
        for cond in conditions:
            if cond.get("type") in KUBELET_CONDITIONS and cond.get("status") != "Unknown":
                cond.update(status="Unknown", reason="NodeStatusUnknown",
                            message="Kubelet stopped posting node status.",
                            lastTransitionTime=since)

    def _pdb_pods(self, pdb: Obj) -> list[Obj]:
        reqs = pdb_requirements((pdb.get("spec") or {}).get("selector"))
        ns = pdb["metadata"]["namespace"]
        return [p for p in self.objects["pods"].values() if reqs is not None
                and p["metadata"]["namespace"] == ns
                and labels_match(p["metadata"].get("labels") or {}, reqs)]

    def _pdb_status(self, pdb: Obj) -> Obj:
        """The disruption controller's arithmetic, with the selected pods as the expected
        count (the real one asks the pods' controllers for their replicas)."""
        pods = self._pdb_pods(pdb)
        expected, healthy = len(pods), sum(1 for p in pods if _healthy(p))
        spec = pdb.get("spec") or {}
        desired = 0
        if spec.get("maxUnavailable") is not None:
            desired = max(0, expected - _scaled(spec["maxUnavailable"], expected))
        elif spec.get("minAvailable") is not None:
            desired = _scaled(spec["minAvailable"], expected)
        allowed = max(0, healthy - desired)
        condition = {"type": "DisruptionAllowed", "status": "True" if allowed else "False",
                     "reason": "SufficientPods" if allowed else "InsufficientPods",
                     "message": "", "observedGeneration": pdb["metadata"]["generation"],
                     "lastTransitionTime": pdb["metadata"]["creationTimestamp"]}
        return {"observedGeneration": pdb["metadata"]["generation"], "currentHealthy": healthy,
                "desiredHealthy": desired, "disruptionsAllowed": allowed,
                "expectedPods": expected, "conditions": [condition]}

    def sync(self) -> None:
        """Make the next read see every write committed before this call (a store in
        memory always does)."""

    def ready(self, within: float) -> bool:
        """Whether the store can serve a watch, waiting up to `within` seconds (a store
        in memory always can)."""
        return True

    def get(self, kind: Kind, ns: str, name: str, fresh: bool = True) -> Obj:
        """`fresh`: the latest state (no resourceVersion asked for); otherwise whatever this
        API server has (resourceVersion=0: its watch cache, even without a quorum)."""
        if fresh:
            self.sync()
        with self.lock:
            return self._view(kind, self._find(kind, ns, name))

    def list_objects(self, kind: Kind, ns: str | None, match: Callable[[Obj], bool],
                     limit: int = 0, continue_token: str = "", fresh: bool = True) -> Obj:
        """Objects in key order for which `match` (the request's selectors) holds; `limit`
        and the opaque continue token page through them as on the real API."""
        try:
            after = base64.urlsafe_b64decode(continue_token.encode()).decode()
        except ValueError:
            raise bad_request("continue key is not valid: illegal base64 data") from None
        if fresh:
            self.sync()
        with self.lock:
            items = []
            for key in sorted(self.objects[kind.resource]):
                obj = self._view(kind, self.objects[kind.resource][key])
                if (ns is None or obj["metadata"].get("namespace") == ns) and key > after \
                        and match(obj):
                    items.append((key, obj))
            meta: Obj = {"resourceVersion": str(self.rv)}
        if limit and len(items) > limit:
            items = items[:limit]
            meta["continue"] = base64.urlsafe_b64encode(items[-1][0].encode()).decode()
        for _, obj in items:  # list items carry no kind/apiVersion on the real API either
            obj.pop("kind", None)
            obj.pop("apiVersion", None)
        return {"kind": f"{kind.kind}List", "apiVersion": kind.api_version, "metadata": meta,
                "items": [obj for _, obj in items]}

    # -- writing ------------------------------------------------------------------------

    def create(self, kind: Kind, ns: str, body: Any) -> Obj:
        if not isinstance(body, dict) or not isinstance(body.get("metadata") or {}, dict):
            raise bad_request(f"the body of the request was in an unknown format; "
                              f"expected a {kind.kind}")
        if body.get("kind") not in (None, kind.kind):
            raise bad_request(f"the kind in the data ({body['kind']}) does not match the "
                              f"expected kind ({kind.kind})")
        meta = dict(body.get("metadata") or {})
        name = meta.get("name") or (meta.get("generateName") and
                                    meta["generateName"] + uuid.uuid4().hex[:5])
        if not name:
            raise invalid(kind, "", "metadata.name", "Required value: name or generateName "
                          "is required")
        if kind.namespaced and meta.get("namespace") not in (None, "", ns):
            raise bad_request("the namespace of the provided object does not match the "
                              "namespace sent on the request")
        _validate(kind, name, body)
        for server_set in ("deletionTimestamp", "deletionGracePeriodSeconds", "generation",
                           "resourceVersion"):
            meta.pop(server_set, None)
        meta.update(name=name, uid=str(uuid.uuid4()), creationTimestamp=rfc3339(time.time()))
        if kind.namespaced:
            meta["namespace"] = ns
        if kind is PDBS:
            meta["generation"] = 1
        obj = {**copy.deepcopy(body), "kind": kind.kind, "apiVersion": kind.api_version,
               "metadata": meta}
        # spec and status are Go structs, never omitted: `add /spec/unschedulable` must work.
        obj.setdefault("spec", {})
        obj["status"] = {} if kind is PDBS else obj.get("status") or {}  # PDB's is computed
        if kind is LEASES:
            obj.pop("status")  # a Lease has none (coordination/v1 types.go)
        if kind is PODS:  # no kubelet will start it, so a created pod is already running
            obj["status"].setdefault("phase", "Running")
        key = f"{ns if kind.namespaced else ''}/{name}"

        def op() -> tuple[Write | None, Callable[[], Obj]]:
            if key in self.objects[kind.resource]:
                raise ApiError(409, "AlreadyExists", f'{_qualified(kind)} "{name}" already '
                               "exists", _details(kind, name))
            new = copy.deepcopy(obj)
            return Write(kind, key, new, None), lambda: self._view(kind, new)

        return self._transact(op)

    def patch(self, kind: Kind, ns: str, name: str, patcher: Patcher, status: bool) -> Obj:
        def op() -> tuple[Write | None, Callable[[], Obj]]:
            old = self._find(kind, ns, name)
            patched = patcher(copy.deepcopy(old))  # a patch result must share nothing with old
            if not isinstance(patched, dict):
                raise bad_request(f"the patched object is not a {kind.kind}")
            meta = patched.get("metadata")
            if not isinstance(meta, dict):
                raise invalid(kind, name, "metadata", "Required value")
            rv = meta.get("resourceVersion")
            if rv and rv != old["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on '
                               f'{_qualified(kind)} "{name}": the object has been modified; '
                               "please apply your changes to the latest version and try again",
                               _details(kind, name))
            # The main resource ignores status changes and the status subresource ignores
            # everything else, as the real registry strategies do.
            new = {**old, "status": patched.get("status")} if status else \
                {**patched, "status": old.get("status")}
            if new["status"] is None:
                new.pop("status")
            new["metadata"] = {**(meta if not status else old["metadata"]),
                               **{k: old["metadata"][k] for k in ("name", "uid", "namespace",
                                  "creationTimestamp", "generation", "resourceVersion")
                                  if k in old["metadata"]}}
            new["kind"], new["apiVersion"] = kind.kind, kind.api_version
            _validate(kind, name, new)
            new = copy.deepcopy(new)
            if kind is NODES and status:
                self._stamp_heartbeat(old, new)
            if new == old:  # a no-op writes nothing, as for real
                if kind is NODES and status:
                    # A heartbeat in the same second as the last (RFC 3339 has seconds):
                    # this API server saw the kubelet post, the others see the next one.
                    self.heartbeats[name] = time.monotonic()
                return None, lambda: self._view(kind, old)
            if kind is PDBS and new.get("spec") != old.get("spec"):
                new["metadata"]["generation"] += 1
            return Write(kind, f"{ns}/{name}", new, old), lambda: self._view(kind, new)

        return self._transact(op)

    def _stamp_heartbeat(self, old: Obj, new: Obj) -> None:
        now = rfc3339(time.time())

        def by_type(node: Obj) -> dict[str, Obj]:
            return {c.get("type"): c for c in (node.get("status") or {}).get("conditions") or []}

        # Transitions are judged against what clients saw, stale Unknown included; a
        # transition time the patch did not send itself (absent, or merged in from the old
        # condition) becomes now.
        stored, seen = by_type(old), by_type(self._view(NODES, old))
        for ctype, cond in by_type(new).items():
            cond["lastHeartbeatTime"] = now
            prev = seen.get(ctype, {})
            carried = {None, prev.get("lastTransitionTime"),
                       stored.get(ctype, {}).get("lastTransitionTime")}
            if prev.get("status") != cond.get("status") and \
                    cond.get("lastTransitionTime") in carried:
                cond["lastTransitionTime"] = now

    def delete(self, kind: Kind, ns: str, name: str) -> Obj:
        def op() -> tuple[Write | None, Callable[[], Obj]]:
            old = self._find(kind, ns, name)
            obj = self._view(kind, old)
            return Write(kind, f"{ns}/{name}", None, old), lambda: obj

        obj = self._transact(op)
        if kind is PODS:  # the pod registry returns the deleted object, others a Status
            return obj
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {**_details(kind, name), "uid": obj["metadata"]["uid"]}}

    def evict(self, ns: str, name: str, body: Any) -> tuple[int, Obj]:
        """The eviction subresource: PDB check, then delete (pkg/registry/core/pod/storage)."""
        if not isinstance(body, dict) or (body.get("metadata") or {}).get("name") != name:
            raise bad_request("name in URL does not match name in Eviction object")
        success = 201, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                        "status": "Success"}

        def op() -> tuple[Write | None, Callable[[], tuple[int, Obj]]]:
            pod = self._find(PODS, ns, name)
            phase = (pod.get("status") or {}).get("phase")
            if phase not in ("Succeeded", "Failed", "Pending") and \
                    not pod["metadata"].get("deletionTimestamp"):
                pdbs = [p for p in self.objects["poddisruptionbudgets"].values()
                        if p["metadata"]["namespace"] == ns and pod in self._pdb_pods(p)]
                if len(pdbs) > 1:
                    return None, lambda: (500, {
                        "kind": "Status", "apiVersion": "v1", "metadata": {},
                        "status": "Failure", "code": 500, "message": "This pod has more "
                        "than one PodDisruptionBudget, which the eviction subresource does "
                        "not support."})
                if pdbs:
                    self._check_budget(pdbs[0], pod)
            grace = _grace_period(body, pod)
            key = f"{ns}/{name}"
            if grace <= 0 or pod["metadata"].get("deletionTimestamp"):
                return Write(PODS, key, None, pod), lambda: success
            # Like a kubelet given a grace period: the pod stays listed, terminating, until
            # it has shut down, then it is gone. The field is an int64, as for real (a
            # client with typed models refuses 1.0).
            new = copy.deepcopy(pod)
            new["metadata"].update(deletionTimestamp=rfc3339(math.ceil(time.time() + grace)),
                                   deletionGracePeriodSeconds=math.ceil(grace))

            return Write(PODS, key, new, pod), lambda: success

        return self._transact(op)

    def _terminated(self, ns: str, name: str, uid: str) -> None:
        def op() -> tuple[Write | None, Callable[[], None]]:
            pod = self.objects["pods"].get(f"{ns}/{name}")
            if pod is None or pod["metadata"].get("uid") != uid:
                return None, lambda: None
            return Write(PODS, f"{ns}/{name}", None, pod), lambda: None

        # No quorum for the delete (the member this store reads paused, say): the pod stays
        # terminating until a later try. One try only left it terminating for good, which
        # no kubelet does (a drain then timed out on a pod long past its grace period).
        while True:
            try:
                self._transact(op)
                return
            except (ApiError, OSError):
                if self.closed.wait(KUBELET_RETRY):
                    return

    def _check_budget(self, pdb: Obj, pod: Obj) -> None:
        st = self._pdb_status(pdb)
        if not _healthy(pod) and st["currentHealthy"] >= st["desiredHealthy"] > 0:
            return  # an unready pod may go while the budget is met
        if st["disruptionsAllowed"] == 0:
            message = (f"The disruption budget {pdb['metadata']['name']} needs "
                       f"{st['desiredHealthy']} healthy pods and has {st['currentHealthy']} "
                       "currently")
            raise ApiError(429, "TooManyRequests", "Cannot evict pod as it would violate the "
                           "pod's disruption budget.",
                           {"causes": [{"reason": "DisruptionBudget", "message": message}]})


def _grace_period(body: Obj, pod: Obj) -> float:
    """Seconds the evicted pod takes to go: the eviction's deleteOptions, else the pod's
    own terminationGracePeriodSeconds. Unlike the real default (30 s), a pod that sets
    neither goes at once: no kubelet here would take that long."""
    options = body.get("deleteOptions") or {}
    value = options.get("gracePeriodSeconds")
    if value is None:
        value = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else 0.0


def _healthy(pod: Obj) -> bool:
    return ((pod.get("status") or {}).get("phase") == "Running"
            and not pod["metadata"].get("deletionTimestamp"))


def _scaled(value: int | str, total: int) -> int:
    """An IntOrString; percentages round up, as the disruption controller does; -1 for
    anything else (refused when the PDB is written)."""
    if isinstance(value, str) and value.endswith("%") and value[:-1].isdigit():
        return math.ceil(total * int(value[:-1]) / 100)
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def _validate(kind: Kind, name: str, obj: Obj) -> None:
    """The few validation rules whose absence would let a bad object reach the client's
    deserialiser (which then fails far from the cause)."""
    meta = obj.get("metadata") or {}
    for field in ("labels", "annotations"):
        values = meta.get(field) or {}
        if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
            raise invalid(kind, name, f"metadata.{field}", "Invalid value: values must be "
                          "strings")
    spec = obj.get("spec") or {}
    if kind is PODS:
        containers = spec.get("containers")
        if not containers or not all(isinstance(c, dict) and c.get("name") and c.get("image")
                                     for c in containers):
            raise invalid(kind, name, "spec.containers", "Required value: each container "
                          "needs a name and an image")
    budget = [spec[k] for k in ("minAvailable", "maxUnavailable") if spec.get(k) is not None]
    if kind is PDBS and len(budget) > 1:
        raise invalid(kind, name, "spec", "Invalid value: minAvailable and maxUnavailable "
                      "cannot be both set")
    if kind is PDBS and budget and not _scaled(budget[0], 0) >= 0:
        raise invalid(kind, name, "spec", f"Invalid value: {budget[0]!r}: must be an integer "
                      "or a percentage")
    if kind is NODES and not isinstance(spec.get("unschedulable", False), bool):
        raise invalid(kind, name, "spec.unschedulable", "Invalid value: must be a boolean")
