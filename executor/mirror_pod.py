"""rke2's API server as the cluster sees it: the kubelet's mirror pod of its static pod.

On rke2 the API server is a static pod the kubelet keeps running while the engine is
stopped. A start rewrites its manifest
(/var/lib/rancher/rke2/agent/pod-manifests/kube-apiserver.yaml), whose metadata.uid rke2
derives from the whole pod (pkg/executor/staticpod/staticpod.go); the kubelet takes that
uid as the pod's `kubernetes.io/config.hash` and posts a mirror pod
`kube-apiserver-<node>` in kube-system carrying it and its container's status. Until the
kubelet has replaced the pod of an older manifest, the old API server keeps answering
/readyz (rancher/rke2#3004). So a restarted rke2 controller's API server is the new one
only when its mirror pod's config hash is the manifest's uid, its container runs, and,
where the start changed the manifest, the container started after the stop.

Crash loops show there too: the container's restartCount (the kubelet's own count; the
log files under /var/log/pods are garbage-collected down to the last dead container's,
so counting them undercounts a loop on a real node).

Pure judgements here; the reading goes through a controller that is not restarting (the
restarting one's API server is the thing in doubt).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from planner.kube import official_client, raw_get
from planner.kube_bounds import AnswerRefused

CONFIG_HASH = "kubernetes.io/config.hash"
READ_TIMEOUT = 5


@dataclass(frozen=True)
class MirrorView:
    config_hash: str
    running: bool
    started_at: datetime.datetime | None
    restarts: int
    waiting: str = ""  # the container's waiting reason (CrashLoopBackOff), if not running


def mirror_name(node: str) -> str:
    return f"kube-apiserver-{node}"


def _map(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def parse_mirror(obj: Any) -> MirrorView | str:
    """A pod object (the API's JSON) -> its view, or what is wrong with it."""
    if not isinstance(obj, dict):
        return "not a pod object"
    config_hash = _map(_map(obj.get("metadata")).get("annotations")).get(CONFIG_HASH)
    if not isinstance(config_hash, str) or not config_hash:
        return f"no {CONFIG_HASH} annotation"
    statuses = _map(obj.get("status")).get("containerStatuses")
    found = next((_map(s) for s in statuses if _map(s).get("name") == "kube-apiserver"),
                 None) if isinstance(statuses, list) else None
    if found is None:
        return "no kube-apiserver container status yet"
    restarts = found.get("restartCount")
    state = _map(found.get("state"))
    running = state.get("running")
    started = None
    if isinstance(running, dict):
        try:
            started = datetime.datetime.fromisoformat(
                str(running.get("startedAt")).replace("Z", "+00:00"))
        except ValueError:
            started = None
        if started is not None and started.tzinfo is None:
            started = started.replace(tzinfo=datetime.UTC)
    return MirrorView(config_hash, isinstance(running, dict), started,
                      restarts if isinstance(restarts, int) and restarts >= 0 else 0,
                      str(_map(state.get("waiting")).get("reason") or "")[:60])


def fresh(view: MirrorView | str, manifest: str, before_manifest: str,
          stopped_at: int | None) -> str:
    """"" when the API server that runs is the one of the manifest this start wrote, else
    what it still is."""
    if isinstance(view, str):
        return f"its mirror pod: {view}"
    if view.config_hash != manifest:
        return (f"the kube-apiserver pod serving is not the one of the manifest this start "
                f"wrote (mirror pod config hash {view.config_hash[:12]}, manifest "
                f"{manifest[:12]})")
    if not view.running:
        return f"the kube-apiserver container is not running ({view.waiting or 'no state'})"
    if manifest != before_manifest and stopped_at is not None and (
            view.started_at is None or view.started_at <
            datetime.datetime.fromtimestamp(stopped_at, datetime.UTC)):
        return "the kube-apiserver container running started before the stop"
    return ""


def crash_restarts(view: MirrorView | str, before: MirrorView | str | None,
                   manifest: str = "", undone: str = "") -> int | None:
    """The container's restarts on its own since the engine's start, beyond the one a
    start may cause (None when it cannot be told): a new pod counts from 0, the same pod
    from its count before the stop (not read then: it cannot be told). A pod of another
    manifest than the one this start wrote (`manifest`, when known) is an older one the
    kubelet has not replaced yet: its crashes are its own config's (a rollback's start
    meets the crash-looping pod of the config it is undoing), not this start's.

    `undone`, for a rollback: the manifest on the host when it began, the config being
    undone. Until the start rewrites the manifest the host still shows that one, and the
    kubelet (new, its back-off forgotten) restarts that pod meanwhile: the manifest read
    then is not this start's, and neither are those restarts."""
    if isinstance(view, str) or not isinstance(before, MirrorView):
        return None
    if (manifest and view.config_hash != manifest) or (undone and view.config_hash == undone):
        return None
    if before.config_hash == view.config_hash:
        return view.restarts - before.restarts - 1
    return view.restarts


def mirror_reader(admin: dict[str, Any], addresses: Sequence[str], node: str,
                  point_at: Callable[[dict[str, Any], str], dict[str, Any]]
                  ) -> Callable[[], MirrorView | str]:
    """Read the mirror pod through the first of `addresses` (the other controllers' API
    servers, then the node's own) that answers."""
    clients: dict[str, Any] = {}
    path = f"/api/v1/namespaces/kube-system/pods/{mirror_name(node)}"

    def read() -> MirrorView | str:
        import kubernetes  # slow to import; only a controller's restart needs it

        why = "no API server to ask"
        for address in addresses:
            try:
                if address not in clients:
                    clients[address] = official_client(point_at(admin, address)).api_client
                response = raw_get(clients[address], path, timeout=READ_TIMEOUT)
                return parse_mirror(json.loads(response.data))
            except kubernetes.client.ApiException as exc:
                why = f"HTTP {exc.status} from {address}"
                if exc.status == 404:
                    return f"{mirror_name(node)} not found"
            except (AnswerRefused, ValueError) as exc:
                why = f"{address}: {str(exc)[:120]}"
            except Exception as exc:  # noqa: BLE001 - down, TLS, timeout: the next one
                why = f"{address}: {type(exc).__name__}"
        return why

    return read
