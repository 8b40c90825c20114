"""The Kubernetes side of a rollout: cordon, drain, uncordon.

Drain follows `kubectl drain`: it goes through the eviction subresource so that
PodDisruptionBudgets are honoured (a 429 is retried until the drain timeout), skips mirror
and DaemonSet pods (their controllers would recreate them on the same node anyway) and
refuses, before evicting anything, pods whose data or existence would be lost for good
(emptyDir volumes, no controller) unless the caller opted in.

The requests themselves, bounded in time and read as plain JSON: node_api.py; the pods'
verdicts and what is left of them: drain_pods.py.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Literal

from kubernetes.client.exceptions import ApiException

from planner.threads import start

from . import api_shape
from .api_shape import Obj
from .drain_pods import (
    DrainOptions,
    DrainReport,
    EvictedPods,
    PodVerdict,
    classify_pod,
    eviction_body,
)
from .node_api import DrainError, NodeApi, api_message
from .polling import pause
from .watch import Watcher, WatchEvent, pods_watcher

log = logging.getLogger("cargoship.executor")

# Cordon re-reads the node after a conflicting update; this many in a row is not a race.
CONFLICT_RETRIES = 5
# Set on the nodes cargoship cordons (value: the plan), removed when it uncordons them.
CORDONED_BY = "cargoship.io/cordoned-by"


class NodeOps(NodeApi):
    """Cordon, drain and uncordon a node, as `kubectl` does (see above)."""

    # --- cordon / uncordon ---------------------------------------------------------------

    def read_node(self, node: str) -> Obj:
        """The node as the API has it now (DrainError when the API cannot be asked)."""
        return api_shape.node(
            self._json(node, "reading the node", "read_node", node), node)

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
                self._json(node, "cordon", "patch_node", node, patch, allow=(409,))
            except ApiException:
                continue
            log.info("node %s: cordoned", node)
            return True
        raise DrainError(node, f"cordon failed: {CONFLICT_RETRIES} conflicting updates in a row")

    def uncordon(self, node: str) -> None:
        self._json(node, "uncordon", "patch_node", node,
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
              then: Callable[[], None] | None = None,
              note: Callable[[str], None] | None = None) -> DrainReport:
        """Evict the node's pods (it must be cordoned first, or they could come straight
        back: checked unless the caller has just `cordoned` it) and wait until they are
        gone, all within options.timeout. `then` is called once the evictions are asked
        for, before the wait; `note` hears, once each, which pods a disruption budget
        holds back, and which evicted pods are still shutting down at the first look
        after the evictions: either wait may last the whole timeout."""
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
                                        options, deadline, note)
        skipped += [f"{key} (already gone)" for key in gone]
        if then is not None:
            then()
        self._wait_gone(node, evicted, options, deadline, note)
        log.info("node %s: drained (%d evicted, %d skipped)", node, len(evicted), len(skipped))
        return DrainReport(tuple(sorted(evicted)), tuple(sorted(skipped)))

    def _evict_all(self, node: str, pods: list[PodVerdict], options: DrainOptions,
                   deadline: float, note: Callable[[str], None] | None = None
                   ) -> tuple[dict[str, str], list[str]]:
        """Evict in rounds: a pod blocked by a budget does not hold up the others, as with
        kubectl's parallel evictions. Returns evicted pods (key -> uid) and pods found gone."""
        evicted: dict[str, str] = {}
        gone: list[str] = []
        pending = list(pods)
        said = False
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
            if note is not None and not said:
                said = True
                note(f"draining: waiting for {_few([p.pod for p, _ in blocked])} (a "
                     f"disruption budget allows no eviction now), up to the "
                     f"{options.timeout:g} s drain timeout")
            pending = [p for p, _ in blocked]
            self._pause(node, min(options.retry_interval, remaining))

    def _evict(self, node: str, pod: PodVerdict,
               options: DrainOptions) -> tuple[Literal["evicted", "gone", "blocked"], str]:
        """The outcome, and for "blocked" the budget's message."""
        namespace, name = pod.pod.split("/", 1)
        try:
            self._json(node, f"eviction of {pod.pod}", "create_namespaced_pod_eviction",
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
                   deadline: float, note: Callable[[str], None] | None = None) -> None:
        """An eviction only starts the pod's graceful shutdown; the node is drained when
        the pods are actually off it. Followed with a watch of the node's pods: each goes
        the moment the API says so, not at the next look."""
        left = EvictedPods(dict(evicted))

        def broken(why: str) -> None:
            raise DrainError(node, f"listing its pods failed: API unreachable: {why}")

        if not left.pods:
            return
        until = self._remaining(deadline)
        seen_lock, gone = threading.Lock(), threading.Event()

        def seen(event: WatchEvent) -> bool:
            with seen_lock:
                if left.seen(event):
                    gone.set()
            return gone.is_set()

        watcher = pods_watcher(self.api, node, seen, broken, until)
        # A watch is served from its API server's cache, which its own etcd member feeds:
        # a member that hangs leaves that watch silent, not broken. A fresh list every
        # retry_interval (a quorum read, handed to another controller's API server when
        # this one cannot answer it) still sees the pods go.
        def still_going() -> None:
            # Under the lock `seen` takes: not said once the pods are seen gone, so the
            # line never follows the drain's end.
            with seen_lock:
                if note is not None and left.pods and not gone.is_set():
                    note(f"draining: waiting for {_few(sorted(left.pods))} to shut down "
                         f"(evicted), up to the {options.timeout:g} s drain timeout")

        start(lambda: self._check_gone(node, seen, gone, watcher, options, until,
                                       still_going),
              name="cargoship-drain-check")
        with self._watchers_lock:
            self._watchers[id(watcher)] = watcher
        try:
            self._check_aborted(node)
            done = watcher.run("", until) or gone.is_set()
        finally:
            # Ends the checker after the request it may have under way; not waited for,
            # as that request may be meeting the hung API server this is all about.
            gone.set()
            with self._watchers_lock:
                self._watchers.pop(id(watcher), None)
        self._check_aborted(node)
        if not done:
            raise DrainError(node, f"evicted pods still on the node after the "
                                   f"{options.timeout:g} s drain timeout: "
                                   + ", ".join(sorted(left.pods)))

    def _check_gone(self, node: str, seen: Callable[[WatchEvent], bool],
                    gone: threading.Event, watcher: Watcher, options: DrainOptions,
                    until: float, still_going: Callable[[], None]) -> None:
        said = False
        while not gone.wait(options.retry_interval) and time.monotonic() < until:
            try:
                pods = self._pods_on(node)
            except (DrainError, api_shape.ApiShapeError) as exc:
                log.debug("node %s: listing its pods while they go: %s", node, exc)
                continue
            if seen(WatchEvent("SYNCED", {"items": pods})):
                watcher.close()
                return
            if not said:
                said = True
                still_going()

    def _remaining(self, deadline: float) -> float:
        """The deadline on time.monotonic's scale, whatever this object's clock is."""
        return time.monotonic() + max(0.0, deadline - self._clock())

    def _pods_on(self, node: str) -> list[Obj]:
        listed = self._json(node, "listing its pods", "list_pod_for_all_namespaces",
                            field_selector=f"spec.nodeName={node}")
        items, _ = api_shape.listing(listed, f"the pods of node {node}")
        return [api_shape.pod(p, f"on node {node}") for p in items]


def _few(names: list[str]) -> str:
    """Pods named in a progress line: the first three, then how many more."""
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
