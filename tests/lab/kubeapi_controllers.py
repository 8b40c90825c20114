"""The controllers folded into the lab's Kubernetes API stand-in that write objects: what
kube-controller-manager runs, in one place at a time.

- Leader election as kube-controller-manager does it (client-go tools/leaderelection/
  leaderelection.go with a resourcelock.LeaseLock): a Lease object, kube-system/
  kube-controller-manager, that a candidate takes when it is free or its holder let it
  expire, and the holder renews; every write an optimistic update (compare the key's
  mod_revision), so two candidates cannot both win. A holder that cannot renew within
  RENEW_DEADLINE stops acting (its member lost its quorum, say) and another takes over
  once the lease has run out. Timings are the real ones (15 s lease, 10 s deadline, 2 s
  retry) scaled down for the lab's short runs.
- The node lifecycle controller (pkg/controller/nodelifecycle/node_lifecycle_controller.go,
  monitorNodeHealth and tryUpdateNodeHealth): a node whose heartbeat has not changed for
  `stale_after` seconds gets its kubelet-owned conditions set to Unknown. When a heartbeat
  changed is what every API server's watch cache notes as it sees the stored node change
  (Store.probes; the real controller's probeTimestamp, from its informer), so whichever
  server leads next starts from what it saw, not from another process's memory.
- A pod evicted with a grace period that nobody deleted after it (the front end that
  evicted it went away before its timer): deleted once its deletionTimestamp has passed,
  as the kubelet that shut it down would have.

Standard library only (runs on a lab host's system Python).
"""

from __future__ import annotations

import calendar
import copy
import json
import sys
import threading
import time
import traceback
from typing import Any

from kubeapi_store import KUBELET_CONDITIONS, LEASES, NODES, ApiError, Obj, rfc3339

TICK = 0.5  # seconds between the controllers' passes
LEASE = LEASES + "kube-system/kube-controller-manager"
LEASE_SECONDS = 5  # leaseDurationSeconds (kube-controller-manager: 15)
RENEW_EVERY = 2.0  # retryPeriod (the same: 2 s; each renewal is an etcd write)
RENEW_DEADLINE = 4.0  # renewDeadline (10 s)


def micro_time(wall: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(wall)) + f".{int(wall % 1 * 1e6):06d}Z"


def parse_time(text: Any) -> float | None:
    try:
        whole, _, fraction = str(text).rstrip("Z").partition(".")
        return calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) + float(
            f"0.{fraction or 0}")
    except ValueError:
        return None


class Controllers:
    def __init__(self, store: Any, identity: str) -> None:
        self.store, self.identity = store, identity
        self.renewed = 0.0  # monotonic time of this candidate's last successful write
        threading.Thread(target=self._run, daemon=True, name="controllers").start()

    @property
    def leading(self) -> bool:
        return time.monotonic() - self.renewed < RENEW_DEADLINE

    def _run(self) -> None:
        while not self.store.closed.wait(TICK):
            if not self.store.synced.is_set():
                continue
            try:
                self._elect()
                if self.leading:
                    self._node_lifecycle()
                    self._sweep_pods()
            except ApiError:
                pass  # no quorum (or a conflict): the next pass tries again
            except Exception:
                traceback.print_exc(file=sys.stderr)

    def _elect(self) -> None:
        with self.store.lock:
            lease, mod = self.store.extra.get(LEASE, (None, 0))
        now = time.time()
        spec = (lease or {}).get("spec") or {}
        mine = spec.get("holderIdentity") == self.identity
        renewed = parse_time(spec.get("renewTime")) or 0.0
        free = lease is None or now > renewed + float(spec.get("leaseDurationSeconds", 0))
        if mine and time.monotonic() - self.renewed < RENEW_EVERY:
            return
        if not mine and not free:
            self.renewed = 0.0
            return
        transitions = int(spec.get("leaseTransitions", 0)) + (0 if mine or lease is None
                                                              else 1)
        new = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {
            "name": "kube-controller-manager", "namespace": "kube-system"}, "spec": {
            "holderIdentity": self.identity, "leaseDurationSeconds": LEASE_SECONDS,
            "acquireTime": spec.get("acquireTime") if mine else micro_time(now),
            "renewTime": micro_time(now), "leaseTransitions": transitions}}
        started = time.monotonic()
        done, _, _ = self.store._txn([(LEASE, mod)], ("put", LEASE, json.dumps(new).encode()))
        if done:
            self.renewed = started

    def _node_lifecycle(self) -> None:
        stale_after = self.store.stale_after
        if stale_after <= 0:
            return
        now = time.monotonic()
        with self.store.lock:
            nodes = list(self.store.objects["nodes"].values())
            overdue = {}
            for node in nodes:
                name = node["metadata"]["name"]
                seen = self.store.probes.setdefault(name, now)
                if now - seen > stale_after and _marks(copy.deepcopy(node), 0.0) is not None:
                    overdue[name] = now - seen - stale_after
        for name, late in overdue.items():
            try:
                self.store.update(NODES, "", name, lambda node, late=late: _marks(node, late))
            except ApiError as exc:
                if exc.code != 404:
                    raise

    def _sweep_pods(self) -> None:
        now = time.time()
        with self.store.lock:
            gone = [(p["metadata"]["namespace"], p["metadata"]["name"], p["metadata"]["uid"])
                    for p in self.store.objects["pods"].values()
                    if (parse_time(p["metadata"].get("deletionTimestamp")) or now + 9) + 1 < now]
        for ns, name, uid in gone:
            self.store.terminated(ns, name, uid)


def _marks(node: Obj, overdue: float) -> Obj | None:
    """The node with its kubelet's conditions Unknown, as the node lifecycle controller
    writes it (None: nothing to change)."""
    since = rfc3339(time.time() - overdue)
    status = node.setdefault("status", {})
    conditions = status.setdefault("conditions", [])
    changed = False
    if not any(c.get("type") == "Ready" for c in conditions):
        conditions.append({"type": "Ready", "status": "Unknown", "reason":
                           "NodeStatusNeverUpdated", "message": "Kubelet never posted "
                           "node status.", "lastTransitionTime": since,
                           "lastHeartbeatTime": node["metadata"]["creationTimestamp"]})
        changed = True
    for cond in conditions:
        if cond.get("type") in KUBELET_CONDITIONS and cond.get("status") != "Unknown":
            cond.update(status="Unknown", reason="NodeStatusUnknown",
                        message="Kubelet stopped posting node status.",
                        lastTransitionTime=since)
            changed = True
    return node if changed else None

