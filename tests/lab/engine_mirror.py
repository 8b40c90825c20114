"""rke2's kube-apiserver static pod as the cluster sees it: its manifest and its mirror pod.

What the real engine and kubelet do, and the lab models here:

* rke2 writes the API server's static pod manifest at every start
  (/var/lib/rancher/rke2/agent/pod-manifests/kube-apiserver.yaml). Its metadata.uid is a
  hash of the whole pod (args, and a FILE_HASH of the files it reads) and of the manifest's
  path: rke2 pkg/executor/staticpod/staticpod.go (the md5 of DeepHashObject(pod) and
  "file:<manifestPath>"), pkg/podtemplate/podtemplate.go (hashFiles into FILE_HASH). So
  the uid changes exactly when what the API server runs with changes.
* The kubelet takes that uid as the static pod's `kubernetes.io/config.hash` annotation
  (kubernetes pkg/kubelet/config/common.go applyDefaults; pkg/kubelet/types/pod_update.go
  ConfigHashAnnotationKey) and posts a mirror pod `kube-apiserver-<node>` in kube-system
  carrying it (`kubernetes.io/config.mirror`, pkg/kubelet/pod/mirror_client.go), with the
  container's status: state.running.startedAt, restartCount (each restart of the
  container in the same pod adds one; a new pod starts at 0).
* Until the kubelet has replaced the pod of an older manifest, the old container keeps
  serving, and the mirror pod still says so (rancher/rke2#3004, the startup hook of
  rancher/rke2#3054: "the old pods would be deployed, then later, the new manifests ...
  replace the old pods").

In the lab the API server stand-in (kubeapi.py --container-state) records, as the
container runtime would, the uid it was started for, when and its restart count; the
engine (the kubelet) posts the mirror pod from that record whenever it changed. Standard
library only: it runs on a lab host's system Python.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

MANIFEST = "agent/pod-manifests/kube-apiserver.yaml"  # under the data dir
CONTAINER_STATE = "agent/lab-apiserver-container.json"  # the runtime's record


def manifest_uid(args: list[str], files: list[str], path: Path, extra: str = "") -> str:
    """The pod's uid as rke2 derives it: its content (args, the files' bytes) and path."""
    h = hashlib.md5(usedforsecurity=False)
    h.update(json.dumps(args).encode())
    for name in files:
        try:
            h.update(Path(name).read_bytes())
        except OSError:
            h.update(b"missing:" + name.encode())
    h.update(f"file:{path}{extra}".encode())
    return h.hexdigest()


def write_manifest(path: Path, node: str, uid: str) -> None:
    """The manifest as YAML (what rke2 writes): only what the lab's readers need. Left as
    it is when unchanged, as rke2's writeFile does (pkg/executor/staticpod/staticpod.go:
    equal bytes are not written again), so its mtime says nothing about this start."""
    text = ("apiVersion: v1\nkind: Pod\nmetadata:\n  labels:\n"
            "    component: kube-apiserver\n    tier: control-plane\n"
            f"  name: kube-apiserver\n  namespace: kube-system\n  uid: {uid}\n"
            "spec:\n  containers:\n  - name: kube-apiserver\n"
            f"  nodeName: {node}\n")
    try:
        if path.read_text() == text:
            return
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def read_manifest_uid(path: Path) -> str:
    try:
        for line in path.read_text().splitlines():
            if line.startswith("  uid: "):
                return line[7:].strip()
    except OSError:
        pass
    return ""


def record_container_start(state: Path, manifest: Path) -> None:
    """At the API server's start (the container runtime's record): the pod uid it runs
    for, when it started, and its restart count in that pod."""
    uid = read_manifest_uid(manifest)
    try:
        before = json.loads(state.read_text())
    except (OSError, ValueError):
        before = {}
    restarts = int(before.get("restart_count", -1)) + 1 if before.get("uid") == uid else 0
    now = time.time()
    record = {"uid": uid, "pid": os.getpid(), "restart_count": restarts,
              "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
              "started_unix": now}  # for tests: when, to the microsecond
    state.parent.mkdir(parents=True, exist_ok=True)
    tmp = state.with_name(state.name + ".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, state)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie is gone
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (OSError, IndexError):
        return False


def mirror_pod(node: str, record: dict[str, Any]) -> dict[str, Any]:
    uid = str(record.get("uid", ""))
    running = _alive(int(record.get("pid", 0)))
    state: dict[str, Any] = {"running": {"startedAt": record.get("started_at")}} if running \
        else {"waiting": {"reason": "CrashLoopBackOff"}}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"kube-apiserver-{node}", "namespace": "kube-system",
                     "labels": {"component": "kube-apiserver", "tier": "control-plane"},
                     "annotations": {"kubernetes.io/config.hash": uid,
                                     "kubernetes.io/config.mirror": uid,
                                     "kubernetes.io/config.source": "file"},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node,
                                          "uid": node, "controller": True}]},
        "spec": {"nodeName": node, "containers": [{"name": "kube-apiserver",
                                                    "image": "lab/kube-apiserver"}]},
        "status": {"phase": "Running" if running else "Pending", "containerStatuses": [{
            "name": "kube-apiserver", "ready": running, "image": "lab/kube-apiserver",
            "imageID": "lab/kube-apiserver@sha256:" + "0" * 64,
            "restartCount": int(record.get("restart_count", 0)), "state": state}]},
    }


class Mirror:
    """The kubelet's mirror pod of the API server: posted when what it says changed (the
    kubelet's status manager writes only changes); a pod of another uid replaces it."""

    def __init__(self, node: Any, state: Path) -> None:
        self.node, self.state = node, state  # engine_node.Node: its _call and name
        self._posted: dict[str, Any] | None = None

    def sync(self) -> None:
        try:
            record = json.loads(self.state.read_text())
        except (OSError, ValueError):
            return  # no container started yet
        pod = mirror_pod(self.node.name, record)
        if pod == self._posted:
            return
        path = f"/api/v1/namespaces/kube-system/pods/{pod['metadata']['name']}"
        old = self._posted
        if old is None:  # a kubelet's start: the mirror pod may be there already
            found = self.node._call("PATCH", path, {"metadata": pod["metadata"]},
                                    "application/merge-patch+json")
            if found == 404:
                found = self.node._call("POST", "/api/v1/namespaces/kube-system/pods", pod)
            if found not in (200, 201):
                return
        elif old["metadata"]["annotations"] != pod["metadata"]["annotations"]:
            # A mirror pod of another config hash is deleted and created again.
            self.node._call("DELETE", path)
            if self.node._call("POST", "/api/v1/namespaces/kube-system/pods", pod) not in (
                    200, 201):
                return
        if self.node._call("PATCH", path + "/status", {"status": pod["status"]},
                           "application/merge-patch+json") == 200:
            self._posted = pod
