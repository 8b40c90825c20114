"""What a drain does with the pods on a node, as plain data: the drain's options, each
pod's verdict (kubectl drain's filters, planner/drain_rules.py), the eviction's body, the
evicted pods a watch follows until they are gone, and the report of what it did."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from planner.drain_rules import classify

from . import api_shape
from .api_shape import Obj
from .watch import WatchEvent


@dataclass(frozen=True)
class DrainOptions:
    timeout: float = 300.0  # the whole drain: evictions and waiting for the pods to go
    grace_period: int = -1  # -1: each pod's own terminationGracePeriodSeconds
    delete_emptydir_data: bool = False
    force: bool = False  # also delete pods not managed by a controller
    # Between eviction attempts blocked by a PDB (429), and between checks that evicted
    # pods are gone.
    retry_interval: float = 2.0


@dataclass(frozen=True)
class DrainReport:
    evicted: tuple[str, ...]  # "ns/name"
    skipped: tuple[str, ...]  # "ns/name (why)"


@dataclass(frozen=True)
class PodVerdict:
    """What drain does with one pod: evict it, leave it alone, or refuse the whole drain."""

    pod: str  # "ns/name"
    uid: str
    action: Literal["evict", "skip", "refuse"]
    why: str = ""

    def __str__(self) -> str:
        return f"{self.pod} ({self.why})" if self.why else self.pod


def classify_pod(pod: Obj, options: DrainOptions) -> PodVerdict:
    """kubectl drain's filters (planner/drain_rules.py, which the plan predicts with)."""
    action, why = classify(pod, options.delete_emptydir_data, options.force)
    return PodVerdict(pod_name(pod), pod_uid(pod), action, why)


def eviction_body(namespace: str, name: str, grace_period: int) -> Obj:
    body: Obj = {"apiVersion": "policy/v1", "kind": "Eviction",
                 "metadata": {"name": name, "namespace": namespace}}
    if grace_period >= 0:
        body["deleteOptions"] = {"gracePeriodSeconds": grace_period}
    return body

def pod_name(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def pod_uid(pod: Obj) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


@dataclass
class EvictedPods:
    """The evicted pods still on a node ("ns/name" -> uid), as a watch tells their fate: a
    pod is gone when deleted, or when a pod of the same name has another uid (a
    replacement is not the evicted pod)."""

    pods: dict[str, str]

    def seen(self, event: WatchEvent) -> bool:
        """Take one watch event; True once none is left."""
        if event.type == "SYNCED":
            present = {(pod_name(p), pod_uid(p))
                       for p in (api_shape.pod(i, "watched") for i in event.object["items"])}
            self.pods = {k: u for k, u in self.pods.items() if (k, u) in present}
        else:
            key = pod_name(api_shape.pod(event.object, "watched"))
            if key in self.pods and (event.type == "DELETED"
                                     or self.pods[key] != pod_uid(event.object)):
                del self.pods[key]
        return not self.pods
