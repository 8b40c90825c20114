"""The Kubernetes side of a rollout: cordon, drain, wait until Ready, uncordon.

Drain follows `kubectl drain`: it goes through the eviction subresource so that
PodDisruptionBudgets are honoured (a 429 is retried until the drain timeout), skips mirror
and DaemonSet pods (their controllers would recreate them on the same node anyway) and
refuses, before evicting anything, pods whose data or existence would be lost for good
(emptyDir volumes, no controller) unless the caller opted in.

The API object is the official client's `CoreV1Api`, handed in by the caller. Its answers
are read as plain JSON (`_preload_content=False`), as the watches read theirs: building the
client's model objects costs 2-3 ms of CPU per node or pod list, more than the request
itself, and a rollout's first wave sends some thirty requests at once.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import urllib3
from kubernetes.client.exceptions import ApiException

from planner.drain_rules import classify
from planner.errors import CargoshipError
from planner.kube import raw_get
from planner.kube_bounds import HOLD, AnswerRefused

from . import api_shape
from .polling import pause
from .watch import WatchEvent, pods_watcher

log = logging.getLogger("cargoship.executor")

# Bounds every single API request, in all (planner/kube_bounds.py): without it a stalled
# connection blocks forever and no drain or readiness timeout could fire.
REQUEST_TIMEOUT = 10
# Cordon re-reads the node after a conflicting update; this many in a row is not a race.
CONFLICT_RETRIES = 5
# Transport failures of the client (connection refused, read timeout, ...).
_UNREACHABLE = (urllib3.exceptions.HTTPError, OSError)


# Set on the nodes cargoship cordons (value: the plan), removed when it uncordons them.
CORDONED_BY = "cargoship.io/cordoned-by"


class DrainError(CargoshipError):
    """Cordon, drain or uncordon failed; the message names the node, the pod(s) and why."""

    def __init__(self, node: str, message: str) -> None:
        self.node = node
        super().__init__(f"node {node}: {message}")


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


Obj = dict[str, Any]  # an API object as the JSON the API sent


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


def api_message(exc: ApiException) -> str:
    """The Status message the API sent, with its causes (a PDB names itself only there)."""
    try:
        body = json.loads(exc.body or "")
    except (TypeError, ValueError):
        return f"HTTP {exc.status} {exc.reason}"
    if not isinstance(body, dict):
        return f"HTTP {exc.status} {exc.reason}"
    causes = [str(c.get("message")) for c in (body.get("details") or {}).get("causes") or []
              if isinstance(c, dict) and c.get("message")]
    message = str(body.get("message") or f"HTTP {exc.status} {exc.reason}")
    return f"{message} ({'; '.join(causes)})" if causes else message


def pod_name(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def pod_uid(pod: dict[str, Any]) -> str:
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


class NodeOps:
    def __init__(self, api: Any, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._api, self._clock, self._sleep = api, clock, sleep
        # Set by a second interrupt: drains stop waiting at once (the host fails, nothing
        # stopped on it). Requests in flight are ended too (kube_bounds).
        self.aborted = threading.Event()
        self._watchers: dict[int, Any] = {}  # by id: a Watcher is not hashable
        self._watchers_lock = threading.Lock()

    def interrupt(self) -> None:
        """End every drain's wait and every API request in flight now."""
        self.aborted.set()
        with self._watchers_lock:
            watchers = list(self._watchers.values())
        for watcher in watchers:
            watcher.close()
        client = getattr(self._api, "api_client", None)
        pool = getattr(getattr(client, "rest_client", None), "pool_manager", None)
        interrupt = getattr(pool, "interrupt", None)
        if interrupt is not None:
            interrupt()

    def _pause(self, node: str, seconds: float) -> None:
        """Sleep, in slices short enough that a second interrupt is heard within one."""
        slices = max(1, math.ceil(seconds / 0.5))
        for _ in range(slices):
            self._check_aborted(node)
            self._sleep(seconds / slices)
        self._check_aborted(node)

    def _check_aborted(self, node: str) -> None:
        if self.aborted.is_set():
            raise DrainError(node, "drain stopped: interrupted again")

    @property
    def api(self) -> Any:
        """The official client's CoreV1Api these operations use."""
        return self._api

    def warm(self, count: int) -> None:
        """Open up to `count` connections to the API ahead of need, by as many requests
        at the same moment (GET /version: no object is read); they stay in the client's
        pool. A wave of hosts that begins together then spends no TLS handshake on its
        cordons and evictions (a new connection: 3-4 ms of CPU here, and a round trip or
        two on a real network). Best effort: a failure is only logged."""
        client = getattr(self._api, "api_client", None)
        if client is None or count <= 0:
            return
        # Each answer is held unread until all have come, so that no request can reuse
        # another's connection: `count` connections, not as many as happened to overlap.
        together = threading.Barrier(count)
        opened = time.monotonic()

        def one() -> None:
            try:
                # HOLD: handed over unread (kube_bounds), so each answer keeps its
                # connection until all have come.
                response = raw_get(client, "/version", headers={HOLD: "1"},
                                   timeout=REQUEST_TIMEOUT)
            except (ApiException, *_UNREACHABLE) as exc:
                together.abort()
                log.debug("opening an API connection ahead failed: %s", exc)
                return
            try:
                together.wait(REQUEST_TIMEOUT)
            except threading.BrokenBarrierError:
                pass
            try:
                # Read to its end, the connection is kept; a version that is no version
                # (more than 64 KiB) is not read on, and its connection is dropped.
                response.read(65536)
                if response.read(1):
                    response.close()
            except _UNREACHABLE as exc:
                log.debug("reading an answer on a connection opened ahead failed: %s", exc)
            finally:
                response.release_conn()

        threads = [threading.Thread(target=one, name="cargoship-warm", daemon=True)
                   for _ in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(2 * REQUEST_TIMEOUT + 1)
        log.debug("%d API connection(s) opened ahead in %.3f s", count,
                  time.monotonic() - opened)

    # --- cordon / uncordon ---------------------------------------------------------------

    def read_node(self, node: str) -> Obj:
        """The node as the API has it now (DrainError when the API cannot be asked)."""
        return api_shape.node(
            self._json(node, "reading the node", self._api.read_node, node), node)

    def cordon(self, node: str, owner: str = "cargoship", read: Obj | None = None) -> bool:
        """Mark the node unschedulable. True if cargoship did it, now or in an earlier run
        that never gave the node back (the CORDONED_BY annotation says so); False if someone
        else cordoned it: only nodes cargoship cordoned may be uncordoned afterwards.
        `read`: the node as just read (read_node), so the cordon starts with its patch; a
        node changed since is read again (the patch carries its resourceVersion)."""
        for _ in range(CONFLICT_RETRIES):
            ahead = read is not None
            current, read = read if read is not None else self.read_node(node), None
            meta = current.get("metadata") or {}
            if (current.get("spec") or {}).get("unschedulable"):
                if ahead:
                    # A patch would be refused if the node changed since, but leaving it
                    # would not: whether someone else holds it is asked again, now.
                    continue
                by = (meta.get("annotations") or {}).get(CORDONED_BY)
                if by:
                    log.info("node %s: left cordoned by cargoship (%s); ours to uncordon",
                             node, by)
                    return True
                log.info("node %s: already cordoned", node)
                return False
            # The resourceVersion makes read-and-patch atomic: if someone else cordoned it
            # in between, the API answers 409 and the re-read tells the truth.
            patch = {"metadata": {"resourceVersion": meta.get("resourceVersion"),
                                  "annotations": {CORDONED_BY: owner}},
                     "spec": {"unschedulable": True}}
            try:
                self._json(node, "cordon", self._api.patch_node, node, patch, allow=(409,))
            except ApiException:
                continue
            log.info("node %s: cordoned", node)
            return True
        raise DrainError(node, f"cordon failed: {CONFLICT_RETRIES} conflicting updates in a row")

    def uncordon(self, node: str) -> None:
        self._json(node, "uncordon", self._api.patch_node, node,
                   {"metadata": {"annotations": {CORDONED_BY: None}},
                    "spec": {"unschedulable": False}})
        log.info("node %s: uncordoned", node)

    def uncordon_retrying(self, node: str, timeout: float,
                          on_retry: Callable[[DrainError], None] | None = None,
                          poll: float = 2.0) -> None:
        """Uncordon, retrying failures (an API restarting or overloaded) until `timeout`;
        the last DrainError after that. Uncordoning twice is harmless."""
        started = self._clock()
        while True:
            try:
                self.uncordon(node)
                return
            except DrainError as exc:
                remaining = started + timeout - self._clock()
                if remaining <= 0 or self.aborted.is_set():  # a second interrupt: no more
                    raise
                if on_retry is not None:
                    on_retry(exc)
                self._sleep(min(pause(self._clock() - started, poll), remaining))

    # --- drain ---------------------------------------------------------------------------

    def drain(self, node: str, options: DrainOptions, *, cordoned: bool = False,
              then: Callable[[], None] | None = None) -> DrainReport:
        """Evict the node's pods (it must be cordoned first, or they could come straight
        back: checked unless the caller has just `cordoned` it) and wait until they are
        gone, all within options.timeout. `then` is called once the evictions are asked
        for, before the wait."""
        deadline = self._clock() + options.timeout
        if not cordoned:
            current = self.read_node(node)
            if not (current.get("spec") or {}).get("unschedulable"):
                raise DrainError(node, "drain refused: the node is not cordoned")
        verdicts = [classify_pod(p, options) for p in self._pods_on(node)]
        refused = [str(v) for v in verdicts if v.action == "refuse"]
        if refused:
            raise DrainError(node, "drain refused, nothing evicted: " + ", ".join(refused))
        skipped = [str(v) for v in verdicts if v.action == "skip"]
        evicted, gone = self._evict_all(node, [v for v in verdicts if v.action == "evict"],
                                        options, deadline)
        skipped += [f"{key} (already gone)" for key in gone]
        if then is not None:
            then()
        self._wait_gone(node, evicted, options, deadline)
        log.info("node %s: drained (%d evicted, %d skipped)", node, len(evicted), len(skipped))
        return DrainReport(tuple(sorted(evicted)), tuple(sorted(skipped)))

    def _evict_all(self, node: str, pods: list[PodVerdict], options: DrainOptions,
                   deadline: float) -> tuple[dict[str, str], list[str]]:
        """Evict in rounds: a pod blocked by a budget does not hold up the others, as with
        kubectl's parallel evictions. Returns evicted pods (key -> uid) and pods found gone."""
        evicted: dict[str, str] = {}
        gone: list[str] = []
        pending = list(pods)
        while True:
            blocked: list[tuple[PodVerdict, str]] = []
            for pod in pending:
                self._check_aborted(node)
                outcome, why = self._evict(node, pod, options)
                if outcome == "evicted":
                    evicted[pod.pod] = pod.uid
                elif outcome == "gone":
                    gone.append(pod.pod)
                else:
                    blocked.append((pod, why))
            if not blocked:
                return evicted, gone
            remaining = deadline - self._clock()
            if remaining <= 0:
                shown = ", ".join(f"{p.pod} ({why})" for p, why in blocked)
                raise DrainError(node, f"eviction blocked by a disruption budget until the "
                                       f"{options.timeout:g} s drain timeout: {shown}")
            pending = [p for p, _ in blocked]
            self._pause(node, min(options.retry_interval, remaining))

    def _evict(self, node: str, pod: PodVerdict,
               options: DrainOptions) -> tuple[Literal["evicted", "gone", "blocked"], str]:
        """The outcome, and for "blocked" the budget's message."""
        namespace, name = pod.pod.split("/", 1)
        try:
            self._json(node, f"eviction of {pod.pod}", self._api.create_namespaced_pod_eviction,
                       name, namespace, eviction_body(namespace, name, options.grace_period),
                       allow=(404, 429))
        except ApiException as exc:
            if exc.status == 404:
                return "gone", ""
            log.info("node %s: eviction of %s blocked: %s", node, pod.pod, api_message(exc))
            return "blocked", api_message(exc)
        log.info("node %s: evicted %s", node, pod.pod)
        return "evicted", ""

    def _wait_gone(self, node: str, evicted: dict[str, str], options: DrainOptions,
                   deadline: float) -> None:
        """An eviction only starts the pod's graceful shutdown; the node is drained when
        the pods are actually off it. Followed with a watch of the node's pods: each goes
        the moment the API says so, not at the next look."""
        left = EvictedPods(dict(evicted))

        def broken(why: str) -> None:
            raise DrainError(node, f"listing its pods failed: API unreachable: {why}")

        if not left.pods:
            return
        until = self._remaining(deadline)
        watcher = pods_watcher(self._api, node, left.seen, broken, until)
        with self._watchers_lock:
            self._watchers[id(watcher)] = watcher
        try:
            self._check_aborted(node)
            done = watcher.run("", until)
        finally:
            with self._watchers_lock:
                self._watchers.pop(id(watcher), None)
        self._check_aborted(node)
        if not done:
            raise DrainError(node, f"evicted pods still on the node after the "
                                   f"{options.timeout:g} s drain timeout: "
                                   + ", ".join(sorted(left.pods)))

    def _remaining(self, deadline: float) -> float:
        """The deadline on time.monotonic's scale, whatever this object's clock is."""
        return time.monotonic() + max(0.0, deadline - self._clock())

    # --- API calls -----------------------------------------------------------------------

    def _pods_on(self, node: str) -> list[Obj]:
        listed = self._json(node, "listing its pods", self._api.list_pod_for_all_namespaces,
                            field_selector=f"spec.nodeName={node}")
        items, _ = api_shape.listing(listed, f"the pods of node {node}")
        return [api_shape.pod(p, f"on node {node}") for p in items]

    def _call(self, node: str, what: str, method: Callable[..., Any], *args: Any,
              allow: tuple[int, ...] = (), **kwargs: Any) -> Any:
        """One API request, bounded in time; failures become a DrainError naming `what`,
        except the HTTP codes in `allow`, which the caller handles."""
        try:
            return method(*args, _request_timeout=REQUEST_TIMEOUT, **kwargs)
        except ApiException as exc:
            if exc.status in allow:
                raise
            raise DrainError(node, f"{what} failed: {api_message(exc)}") from exc
        except AnswerRefused as exc:
            self._check_aborted(node)  # cut off by a second interrupt: say that
            raise DrainError(node, f"{what} failed: the API's answer was cut off: {exc}") \
                from exc
        except _UNREACHABLE as exc:
            raise DrainError(node, f"{what} failed: API unreachable: {exc}") from exc

    def _json(self, node: str, what: str, method: Callable[..., Any], *args: Any,
              allow: tuple[int, ...] = (), **kwargs: Any) -> Obj:
        """_call, with the answer read as a JSON object (see the module's docstring)."""
        def read(*a: Any, **kw: Any) -> bytes:
            response = method(*a, _preload_content=False, **kw)
            try:
                return bytes(response.data)  # read inside _call: a broken read is unreachable
            finally:
                response.release_conn()

        data = self._call(node, what, read, *args, allow=allow, **kwargs)
        try:
            obj = json.loads(data)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            raise DrainError(node, f"{what} failed: the API's answer is not a JSON object")
        return obj
