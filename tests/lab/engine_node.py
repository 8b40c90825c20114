"""The stand-in engine's side of the cluster: its node in the lab's Kubernetes API.

Like a kubelet, it registers its node, posts its status at its start and whenever it
changes, and renews its node Lease as its heartbeat; when it stops it just goes silent
(the API's node grace period decides when the node reads Unknown). Controllers also
write the admin kubeconfig, as the real engine does at start.
Standard library only (it runs on the system Python in a lab host).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

HEARTBEAT = 10.0  # seconds, unless lab-timing.json says otherwise (spec.py Timing)
STATUS_REPORT = 300.0  # the same: nodeStatusReportFrequency
# The kubelet's node Lease (kubernetes pkg/kubelet/kubelet.go: nodeLeaseDurationSeconds
# 40, in kube-node-lease, named after the node).
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
LEASE_SECONDS = 40


class Node:
    def __init__(self, api: str, token: str, name: str, labels: dict[str, str],
                 addresses: list[dict[str, str]] | None = None,
                 report_every: float = STATUS_REPORT,
                 say: Callable[[str, str], None] = lambda level, message: None) -> None:
        self.api, self.token, self.name, self.labels = api, token, name, labels
        self.say = say  # (level, message): a line of the engine's log
        self.addresses = addresses or []
        self.report_every = report_every
        self._reported: float | None = None  # monotonic: this start's last status post
        # http.client, not urllib.request: the datastore speaks plain HTTP, and urllib's
        # imports are ~10 ms more of every engine start's CPU.
        url = urllib.parse.urlsplit(api)
        if url.scheme != "http" or url.hostname is None:
            raise ValueError(f"the lab's datastore is plain http://host:port, not {api}")
        self._address = (url.hostname, url.port or 80)

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None,
              content_type: str = "application/json") -> int:
        return self._ask(method, path, body, content_type)[0]

    def _ask(self, method: str, path: str, body: dict[str, Any] | None = None,
             content_type: str = "application/json") -> tuple[int, bytes]:
        connection = http.client.HTTPConnection(*self._address, timeout=2)
        try:
            connection.request(
                method, path, body=json.dumps(body).encode() if body is not None else None,
                headers={"Authorization": f"Bearer {self.token}",
                         "Content-Type": content_type})
            response = connection.getresponse()
            return int(response.status), response.read()
        except (OSError, http.client.HTTPException):
            return 0, b""  # the API is not up (yet): the caller tries again
        finally:
            connection.close()

    def register(self) -> None:
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.name, "labels": {
                    "kubernetes.io/hostname": self.name, **self.labels}},
                "spec": {}, "status": {"addresses": self.addresses}}
        self._call("POST", "/api/v1/nodes", body)

    def renew_lease(self) -> bool:
        """The heartbeat: the node's Lease renewed (created at the first renewal, as the
        kubelet's lease controller does: k8s.io/component-helpers/apimachinery/lease/
        controller.go, ensureLease); False when the API did not take it."""
        now = time.time()  # renewTime is a MicroTime
        spec = {"holderIdentity": self.name, "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
                + f".{int(now * 1e6) % 1000000:06d}Z"}
        status, body = self._ask("PATCH", f"{LEASES}/{self.name}", {"spec": spec},
                                 "application/merge-patch+json")
        if status == 404:
            status, body = self._ask("POST", LEASES, {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": "kube-node-lease"},
                "spec": spec})
        if status in (200, 201):
            return True
        # As the kubelet logs it (k8s.io/component-helpers/apimachinery/lease/controller.go).
        self.say("error", f"failed to update lease, will retry: {_said(status, body)}")
        return False

    def report(self, ready: bool) -> bool:
        """The kubelet's node status update (kubelet_node_status.go, tryUpdateNodeStatus):
        the node read, its status set, and posted only at this start's first update, when
        it changed (the heartbeat time aside: nodeStatusHasChanged), or `report_every`
        after the last post; the Ready condition's lastTransitionTime moves only when its
        status does (pkg/kubelet/nodestatus/setters.go, ReadyCondition). The kubelet
        starts and ends with its engine (rke2: pkg/podexecutor/staticpod.go, Kubelet(),
        a child process with a death signal; k3s: inside its process), so an engine's
        restart is a kubelet's, and its first update is always posted. False when it
        should be tried again soon (the API did not answer or take it)."""
        code, node = self._node()
        if code == 404 and ready:  # deleted, or the API restarted: register again
            self.register()
            code, node = self._node()
        if code == 404 and not ready:
            return True  # a stopping node's is moot
        if code != 200 or node is None:
            self.say("error", f"Error updating node status, will retry: error getting node "
                              f"{self.name!r}: {_said(code, b'')}")
            return False
        status = node.get("status") or {}
        conditions = status.get("conditions") or []
        current = next((c for c in conditions if isinstance(c, dict) and
                        c.get("type") == "Ready"), {})
        wanted = {"type": "Ready", "status": "True" if ready else "False",
                  "reason": "KubeletReady" if ready else "KubeletNotReady",
                  "message": "lab engine " + ("running" if ready else "stopped")}
        unchanged = all(current.get(k) == v for k, v in wanted.items()) and \
            len(conditions) == 1 and status.get("addresses") == self.addresses
        due = self._reported is None or time.monotonic() - self._reported >= self.report_every
        if unchanged and not due:
            return True
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        since = current.get("lastTransitionTime") \
            if current.get("status") == wanted["status"] else None
        condition = {**wanted, "lastHeartbeatTime": now, "lastTransitionTime": since or now}
        # The kubelet posts its addresses with every status update (setters.go).
        posted, body = self._ask(
            "PATCH", f"/api/v1/nodes/{self.name}/status",
            {"status": {"conditions": [condition], "addresses": self.addresses}},
            "application/merge-patch+json")
        if posted != 200:
            self.say("error", f"Error updating node status, will retry: {_said(posted, body)}")
            return False
        self._reported = time.monotonic()
        return True

    def _node(self) -> tuple[int, dict[str, Any] | None]:
        # From the API server's cache, as the kubelet's first try reads it
        # (resourceVersion=0: util.FromApiserverCache).
        code, body = self._ask("GET", f"/api/v1/nodes/{self.name}?resourceVersion=0")
        if code != 200:
            return code, None
        try:
            node = json.loads(body)
        except ValueError:
            return 0, None
        return (code, node) if isinstance(node, dict) else (0, None)


def _said(status: int, body: bytes) -> str:
    if status == 0:
        return "no answer from the API server"
    try:
        message = json.loads(body).get("message")
    except (ValueError, AttributeError):
        message = None
    return f"HTTP {status}" + (f": {str(message)[:200]}" if message else "")


def write_admin_kubeconfig(path: Path, tls_dir: str) -> None:
    """What rke2/k3s write at start: cluster, user and context all named `default`, the
    server on 127.0.0.1, the CA and the admin's client certificate inline."""
    tls = Path(tls_dir)

    def data(name: str) -> str:
        return base64.b64encode((tls / name).read_bytes()).decode()

    config = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": "default", "cluster": {
            "server": "https://127.0.0.1:6443",
            "certificate-authority-data": data("server-ca.crt")}}],
        "users": [{"name": "default", "user": {
            "client-certificate-data": data("client-admin.crt"),
            "client-key-data": data("client-admin.key")}}],
        "contexts": [{"name": "default", "context": {"cluster": "default", "user": "default"}}],
        "current-context": "default",
    }
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(config, fh, indent=2)  # JSON is YAML: no PyYAML needed to write it
    os.replace(tmp, path)
