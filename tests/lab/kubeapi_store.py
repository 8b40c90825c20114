"""Objects and semantics of the lab's Kubernetes API stand-in; kubeapi.py serves them.

Nodes, pods and PodDisruptionBudgets in the real API's shapes, the eviction subresource, and
the disruption controller folded in (a PDB's status is computed from the live pods on every
read); kubeapi_controllers.py runs the node lifecycle controller.

Storage is kube-apiserver's: each controller's API server keeps its objects in its own etcd
member only (kubeapi_etcd.py), under /registry/..., written as transactions that compare
mod_revision (resourceVersion is the etcd revision), read from a watch cache that a watch
on that member feeds, after a consistent read of the current revision. Two API servers share
nothing but etcd; one whose member has no quorum refuses reads and writes. Every change the
cache sees is also an event in a bounded history, which watches (kubeapi_watch.py) stream
from. Standard library only: it runs on the lab host's system Python.
"""

from __future__ import annotations

import base64
import copy
import json
import math
import sys
import threading
import time
import traceback
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from kubeapi_etcd import ALL, REQUEST_TIMEOUT, Change, Compacted, EtcdUnavailable, prefix_end

Obj = dict[str, Any]
# Kubelet-owned node conditions that the node lifecycle controller marks Unknown.
KUBELET_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
HISTORY = 1000  # events kept for watches from a resourceVersion (the watch cache's window)


class Event(NamedTuple):
    """A write: the object as read after it (None: deleted) and before it (None: created)."""

    rv: int
    type: str  # ADDED, MODIFIED or DELETED
    resource: str
    obj: Obj | None
    prev: Obj | None


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
KINDS = {(k.group, k.resource): k for k in (NODES, PODS, PDBS, HELM_CONFIGS)}


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
#
# kube-apiserver keeps each object under /registry/<resource prefix>/[<namespace>/]<name>
# (staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go, NamespaceKeyFunc;
# nodes under "minions": pkg/kubeapiserver/default_storage_factory_builder.go,
# SpecialDefaultResourcePrefixes; a custom resource under <group>/<resource>), its
# resourceVersion being the key's etcd mod_revision, never stored in the value (etcd3
# store.go: versioner.PrepareObjectForStorage on the way in, UpdateObject on the way out).
PREFIXES = {"nodes": "minions", "pods": "pods",
            "poddisruptionbudgets": "poddisruptionbudgets",
            "helmchartconfigs": "helm.cattle.io/helmchartconfigs"}
RESOURCE_OF = {prefix: resource for resource, prefix in PREFIXES.items()}
FAULTS = "/registry/lab.cargoship.io/faults/"  # the lab's injected faults (kubeapi_hostile.py)
LEASES = "/registry/leases/"  # coordination.k8s.io Leases (leader election)
# The watch cache waits this long for a revision a consistent read asked for (watch_cache.go,
# waitUntilFreshAndBlock's blockTimeout, 3 s), then gives up with a Timeout.
FRESH_WAIT = 3.0


def etcd_key(kind: Kind, ns: str, name: str) -> str:
    return f"/registry/{PREFIXES[kind.resource]}/" + (f"{ns}/" if kind.namespaced else "") + name


def parse_key(key: str) -> tuple[str, str] | None:
    """(resource, the store's key "ns/name" or "/name") of an object's etcd key."""
    if not key.startswith("/registry/"):
        return None
    for prefix, resource in RESOURCE_OF.items():
        if key.startswith(f"/registry/{prefix}/"):
            rest = key[len(prefix) + 11:]
            return resource, rest if "/" in rest else "/" + rest
    return None


def storage_error(exc: Exception) -> ApiError:
    """What kube-apiserver answers when etcd fails it: an internal error with etcd's words
    (a member without quorum: "etcdserver: request timed out", "no leader")."""
    return ApiError(500, "InternalError", f"Internal error occurred: etcd: {exc}", {})


def encode(obj: Obj) -> bytes:
    stored = {**obj, "metadata": {k: v for k, v in obj["metadata"].items()
                                  if k != "resourceVersion"}}
    return json.dumps(stored, separators=(",", ":")).encode()


def decode(value: bytes, mod: int) -> Obj:
    obj: Obj = json.loads(value)
    obj["metadata"]["resourceVersion"] = str(mod)
    return obj


class Store:
    """The API server's storage: writes go to its own KV (kubeapi_etcd: the controller's
    etcd member) as transactions; reads come from a watch cache fed by a watch on that
    member, after a consistent read of the current revision (pkg/storage/cacher/cacher.go,
    ConsistentListFromCache: a linearizable range, then wait for the cache to reach its
    revision). So a member without a quorum fails reads and writes alike, within
    REQUEST_TIMEOUT. Cache keys are "namespace/name" ("/name" when cluster-scoped), so
    sorting them gives the real API's list order."""

    def __init__(self, kv: Any, stale_after: float) -> None:
        self.kv = kv
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)  # notified when the cache moves on
        self.stale_after = stale_after
        self.rv = 0  # the revision the cache has reached
        self.history: deque[Event] = deque(maxlen=HISTORY)
        self.floor = 0  # every change after this revision is in the history
        self.objects: dict[str, dict[str, Obj]] = {k.resource: {} for k in KINDS.values()}
        self.mods: dict[str, int] = {}  # etcd key -> mod_revision, for the cached objects
        self.extra: dict[str, tuple[Obj, int]] = {}  # faults and leases: key -> (value, mod)
        # When this process saw each node's heartbeat change (the node lifecycle
        # controller's probeTimestamp: node_lifecycle_controller.go, tryUpdateNodeHealth).
        self.probes: dict[str, float] = {}
        self.closed = threading.Event()
        self.synced = threading.Event()
        threading.Thread(target=self._reflect, daemon=True, name="watch-cache").start()

    def close(self) -> None:
        self.closed.set()
        getattr(self.kv, "wake", lambda: None)()
        with self.changed:
            self.changed.notify_all()  # watches waiting for a change look at `closed` now

    # -- the watch cache --------------------------------------------------------------

    def _reflect(self) -> None:
        """List everything, then follow the member's watch from there; after a broken watch,
        watch again from where the cache is (a compacted revision: list again)."""
        listed = False
        while not self.closed.is_set():
            try:
                if not listed:
                    rev, kvs = self.kv.range(ALL, ALL)
                    with self.changed:
                        self._replace(rev, kvs)
                    listed = True
                    self.synced.set()
                for rev, changes in self.kv.watch(self.rv + 1, self.closed):
                    with self.changed:
                        self._apply(rev, changes)
            except Compacted:
                listed = False
            except EtcdUnavailable:
                pass
            except Exception:  # a bug must show, and not end the cache's life
                traceback.print_exc(file=sys.stderr)
            self.closed.wait(0.5)

    def _replace(self, rev: int, kvs: list[Any]) -> None:
        for objects in self.objects.values():
            objects.clear()
        self.mods.clear()
        self.extra.clear()
        for kv in kvs:
            self._put(kv.key, kv.value, kv.mod)
        self.history.clear()
        self.rv = self.floor = rev  # watches from before this relist get 410 Expired
        self.changed.notify_all()

    def _put(self, key: str, value: bytes | None, mod: int) -> tuple[str, Obj | None,
                                                                    Obj | None] | None:
        """Cache one key's new value (None: deleted): (resource, obj, previous) for an API
        object, None for anything else."""
        where = parse_key(key)
        if where is None:
            if key.startswith((FAULTS, LEASES)):
                if value is None:
                    self.extra.pop(key, None)
                else:
                    self.extra[key] = (json.loads(value), mod)
            return None
        resource, skey = where
        prev = self.objects[resource].get(skey)
        obj = decode(value, mod) if value is not None else None
        if obj is None:
            self.objects[resource].pop(skey, None)
            self.mods.pop(key, None)
        else:
            self.objects[resource][skey] = obj
            self.mods[key] = mod
        if resource == "nodes":
            name = skey[1:]
            if obj is None:
                self.probes.pop(name, None)
            elif prev is None or _heartbeat(obj) != _heartbeat(prev):
                self.probes[name] = time.monotonic()
        return resource, obj, prev

    def _apply(self, rev: int, changes: list[Change]) -> None:
        for change in changes:
            found = self._put(change.key, change.value, change.mod)
            if found is None:
                continue
            resource, obj, prev = found
            kind = next(k for k in KINDS.values() if k.resource == resource)
            if len(self.history) == self.history.maxlen:
                self.floor = self.history[0].rv  # about to be dropped: watches from before 410
            type = "DELETED" if obj is None else "ADDED" if prev is None else "MODIFIED"
            self.history.append(Event(change.mod, type, resource,
                                      self._view(kind, obj) if obj is not None else None,
                                      self._view(kind, prev) if prev is not None else None))
        self.rv = max(self.rv, rev)
        self.changed.notify_all()

    def wait_for(self, rev: int, timeout: float = FRESH_WAIT) -> bool:
        """Wait until the cache has reached revision `rev`."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while self.rv < rev and not self.closed.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(left)
            return self.rv >= rev

    def fresh(self, kind: Kind | None = None, timeout: float = REQUEST_TIMEOUT) -> None:
        """A consistent read's first step: the current revision from a quorum (a
        linearizable range of one key under the resource's prefix, as
        getCurrentResourceVersionFromStorage does), then the cache caught up with it."""
        if not self.synced.wait(timeout):
            raise storage_error(EtcdUnavailable("the watch cache is not initialized yet"))
        prefix = f"/registry/{PREFIXES[kind.resource]}/" if kind else "/registry/"
        try:
            rev, _ = self.kv.range(prefix, prefix_end(prefix), limit=1, keys_only=True,
                                   timeout=timeout)
        except EtcdUnavailable as exc:
            raise storage_error(exc) from None
        if not self.wait_for(rev):
            raise ApiError(504, "Timeout", f"Too large resource version: {rev}, current: "
                           f"{self.rv}", {"causes": [{"reason": "ResourceVersionTooLarge",
                                                      "message": "Too large resource version"
                                                      }], "retryAfterSeconds": 1})

    # -- writes: etcd transactions ------------------------------------------------------

    def _txn(self, compares: list[tuple[str, int]], op: tuple[str, str, bytes]
             ) -> tuple[bool, int, Any]:
        try:
            done, rev, current = self.kv.txn(compares, op)
        except EtcdUnavailable as exc:
            raise storage_error(exc) from None
        if done:
            self.wait_for(rev)  # so this server's next read (and the view) includes it
        return done, rev, current

    def _current(self, kind: Kind, ns: str, name: str, from_etcd: bool) -> tuple[Obj, int]:
        """The object and its mod_revision: the cache's copy as a first guess (it may be
        stale: the transaction then fails and etcd's copy is used), or etcd's."""
        key = etcd_key(kind, ns, name)
        if not from_etcd:
            with self.lock:
                obj = self.objects[kind.resource].get(f"{ns if kind.namespaced else ''}/{name}")
                if obj is not None:
                    return copy.deepcopy(obj), self.mods[key]
        try:
            _, kvs = self.kv.range(key)
        except EtcdUnavailable as exc:
            raise storage_error(exc) from None
        if not kvs:
            raise not_found(kind, name)
        return decode(kvs[0].value, kvs[0].mod), kvs[0].mod

    def update(self, kind: Kind, ns: str, name: str,
               change: Callable[[Obj], Obj | None]) -> Obj:
        """GuaranteedUpdate (etcd3 store.go): change(current) is the new object (None:
        nothing to write), put if the key's mod_revision is still the one read; on a
        conflict, again from etcd's copy. An error change() raises on a cached copy is
        checked against etcd's before it is believed (origStateIsCurrent)."""
        key = etcd_key(kind, ns, name)
        from_etcd = False
        while True:
            obj, mod = self._current(kind, ns, name, from_etcd)
            try:
                new = change(copy.deepcopy(obj))
            except ApiError:
                if from_etcd:
                    raise
                from_etcd = True
                continue
            if new is None:
                return self._view(kind, obj)
            done, rev, _ = self._txn([(key, mod)], ("put", key, encode(new)))
            if done:
                new["metadata"]["resourceVersion"] = str(rev)
                return self._view(kind, new)
            from_etcd = True

    def delete_key(self, kind: Kind, ns: str, name: str, mod: int) -> bool:
        key = etcd_key(kind, ns, name)
        return self._txn([(key, mod)], ("delete", key, b""))[0]

    # -- reads ---------------------------------------------------------------------------

    def _view(self, kind: Kind, obj: Obj) -> Obj:
        """What a client reads: the stored object, a PDB's status computed from the cached
        pods (the disruption controller's, folded in)."""
        obj = copy.deepcopy(obj)
        if kind is PDBS:
            obj["status"] = self._pdb_status(obj)
        return obj

    def cached(self, kind: Kind, ns: str, name: str) -> Obj | None:
        """The cache's view of an object, no consistent read (for the lab's own routing)."""
        with self.lock:
            obj = self.objects[kind.resource].get(f"{ns if kind.namespaced else ''}/{name}")
            return self._view(kind, obj) if obj is not None else None

    # Reads are served from the cache: the request's handler has made it fresh first
    # (fresh()), once per request, which also brings the lab's faults up to date.

    def get(self, kind: Kind, ns: str, name: str) -> Obj:
        obj = self.cached(kind, ns, name)
        if obj is None:
            raise not_found(kind, name)
        return obj

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

    def list_objects(self, kind: Kind, ns: str | None, match: Callable[[Obj], bool],
                     limit: int = 0, continue_token: str = "") -> Obj:
        """Objects in key order for which `match` (the request's selectors) holds; `limit`
        and the opaque continue token page through them as on the real API."""
        try:
            after = base64.urlsafe_b64decode(continue_token.encode()).decode()
        except ValueError:
            raise bad_request("continue key is not valid: illegal base64 data") from None
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
        if kind is PODS:  # no kubelet will start it, so a created pod is already running
            obj["status"].setdefault("phase", "Running")
        key = etcd_key(kind, ns, name)
        # Create: put only if the key has never been written since it last went (etcd3
        # store.go Create: Compare(ModRevision(key), "=", 0)).
        done, rev, _ = self._txn([(key, 0)], ("put", key, encode(obj)))
        if not done:
            raise ApiError(409, "AlreadyExists", f'{_qualified(kind)} "{name}" already '
                           "exists", _details(kind, name))
        obj["metadata"]["resourceVersion"] = str(rev)
        return self._view(kind, obj)

    def patch(self, kind: Kind, ns: str, name: str, patcher: Patcher, status: bool) -> Obj:
        def change(old: Obj) -> Obj | None:
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
                               **{k: old["metadata"][k] for k in (
                                   "name", "uid", "namespace", "creationTimestamp",
                                   "generation", "resourceVersion") if k in old["metadata"]}}
            new["kind"], new["apiVersion"] = kind.kind, kind.api_version
            _validate(kind, name, new)
            if kind is NODES and status:
                _stamp_heartbeat(old, new)
            if new == old:
                return None  # a no-op patch writes nothing, as for real
            if kind is PDBS and new.get("spec") != old.get("spec"):
                new["metadata"]["generation"] += 1
            return new

        return self.update(kind, ns, name, change)

    def delete(self, kind: Kind, ns: str, name: str) -> Obj:
        from_etcd = False
        while True:
            obj, mod = self._current(kind, ns, name, from_etcd)
            if self.delete_key(kind, ns, name, mod):
                break
            from_etcd = True
        obj = self._view(kind, obj)
        if kind is PODS:  # the pod registry returns the deleted object, others a Status
            return obj
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {**_details(kind, name), "uid": obj["metadata"]["uid"]}}

    def evict(self, ns: str, name: str, body: Any) -> tuple[int, Obj]:
        """The eviction subresource: PDB check, then delete (pkg/registry/core/pod/storage/
        eviction.go). The real one records the disruption in the PDB's status with an
        optimistic update, so two evictions cannot both spend the last allowed one; here
        the transaction compares the pod, its PDB and every pod the PDB selects."""
        if not isinstance(body, dict) or (body.get("metadata") or {}).get("name") != name:
            raise bad_request("name in URL does not match name in Eviction object")
        while True:
            self.fresh(PODS)
            with self.lock:
                pod = copy.deepcopy(self.objects["pods"].get(f"{ns}/{name}"))
                if pod is None:
                    raise not_found(PODS, name)
                compares = [(etcd_key(PODS, ns, name), self.mods[etcd_key(PODS, ns, name)])]
                phase = (pod.get("status") or {}).get("phase")
                if phase not in ("Succeeded", "Failed", "Pending") and \
                        not pod["metadata"].get("deletionTimestamp"):
                    pdbs = [p for p in self.objects["poddisruptionbudgets"].values()
                            if p["metadata"]["namespace"] == ns and
                            name in {q["metadata"]["name"] for q in self._pdb_pods(p)}]
                    if len(pdbs) > 1:
                        return 500, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                     "status": "Failure", "code": 500, "message": "This pod "
                                     "has more than one PodDisruptionBudget, which the "
                                     "eviction subresource does not support."}
                    if pdbs:
                        self._check_budget(pdbs[0], pod)
                        pdb_ns, pdb_name = ns, pdbs[0]["metadata"]["name"]
                        compares.append((etcd_key(PDBS, pdb_ns, pdb_name),
                                         self.mods[etcd_key(PDBS, pdb_ns, pdb_name)]))
                        compares += [(etcd_key(PODS, ns, q["metadata"]["name"]),
                                      self.mods[etcd_key(PODS, ns, q["metadata"]["name"])])
                                     for q in self._pdb_pods(pdbs[0])
                                     if q["metadata"]["name"] != name]
            grace = _grace_period(body, pod)
            key = etcd_key(PODS, ns, name)
            if grace > 0 and not pod["metadata"].get("deletionTimestamp"):
                # Like a kubelet given a grace period: the pod stays listed, terminating,
                # until it has shut down, then it is gone. The field is an int64, as for
                # real (a client with typed models refuses 1.0).
                pod["metadata"].update(deletionTimestamp=rfc3339(time.time() + grace),
                                       deletionGracePeriodSeconds=math.ceil(grace))
                done = self._txn(compares, ("put", key, encode(pod)))[0]
                if done:
                    timer = threading.Timer(grace, self.terminated, (ns, name,
                                                                     pod["metadata"]["uid"]))
                    timer.daemon = True
                    timer.start()
            else:
                done = self._txn(compares, ("delete", key, b""))[0]
            if done:
                return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                             "status": "Success"}

    def terminated(self, ns: str, name: str, uid: str) -> None:
        """The kubelet's last word on a pod it has shut down: gone (if it is still that pod)."""
        with self.lock:
            pod = self.objects["pods"].get(f"{ns}/{name}")
            mod = self.mods.get(etcd_key(PODS, ns, name), 0)
        if pod is not None and pod["metadata"].get("uid") == uid:
            try:
                self.delete_key(PODS, ns, name, mod)
            except ApiError:
                pass  # no quorum now: the lifecycle controllers' sweep deletes it later

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


def _heartbeat(node: Obj) -> Any:
    return next((c.get("lastHeartbeatTime") for c in (node.get("status") or {}).get(
        "conditions") or [] if c.get("type") == "Ready"), None)


def _stamp_heartbeat(old: Obj, new: Obj) -> None:
    """A node status write: every condition's heartbeat is now; a transition time the patch
    did not send itself (absent, or merged in from the old condition) becomes now when the
    status changed."""
    now = rfc3339(time.time())

    def by_type(node: Obj) -> dict[str, Obj]:
        return {c.get("type"): c for c in (node.get("status") or {}).get("conditions") or []}

    stored = by_type(old)
    for ctype, cond in by_type(new).items():
        cond["lastHeartbeatTime"] = now
        prev = stored.get(ctype, {})
        if prev.get("status") != cond.get("status") and \
                cond.get("lastTransitionTime") in {None, prev.get("lastTransitionTime")}:
            cond["lastTransitionTime"] = now


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
