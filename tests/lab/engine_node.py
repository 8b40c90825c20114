"""The stand-in engine's side of the cluster: its node in the lab's Kubernetes API.

Like a kubelet, it registers its node and keeps it Ready with a status heartbeat; when it
stops it just goes silent (the API's node grace period decides when the node reads
Unknown). Controllers also write the admin kubeconfig, as the real engine does at start.
It reaches the API servers as rke2's and k3s's agents do, through their client load
balancer (k3s pkg/agent/loadbalancer): a controller's own API server first, then the
others in turn, staying with one that answers. Standard library only (it runs on the
system Python in a lab host).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

HEARTBEAT = 1.0  # seconds, unless lab-timing.json says otherwise (a kubelet: 10 s)
TRUTHFUL = "X-Lab-Truthful"  # the lab's own requests meet no injected fault (kubeapi_hostile)


class ApiClient:
    """Requests to the controllers' API servers (TLS, the cluster's CA, the lab's token) on
    one kept-alive connection: the one that answered last, else the next in the list. An
    answer of 500 or more (its etcd member has no quorum) or none at all moves on."""

    def __init__(self, urls: list[str], token: str, ca_file: str) -> None:
        self.urls, self.token = list(urls), token
        self.context = ssl.create_default_context(cafile=ca_file)
        self.current = 0
        self.conn: http.client.HTTPSConnection | None = None
        self.lock = threading.Lock()

    def call(self, method: str, path: str, body: Any = None,
             content_type: str = "application/json") -> tuple[int, bytes]:
        """(status, body); (0, b"") when no API server answers."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": content_type,
                   TRUTHFUL: "1"}
        with self.lock:
            for _ in range(len(self.urls)):
                try:
                    if self.conn is None:
                        url = urllib.parse.urlsplit(self.urls[self.current])
                        self.conn = http.client.HTTPSConnection(
                            url.hostname or "", url.port or 6443, timeout=4,
                            context=self.context)
                    self.conn.request(method, path, body=data, headers=headers)
                    response = self.conn.getresponse()
                    answer = response.read()
                    if response.status < 500:
                        if response.will_close:
                            self.conn.close()
                            self.conn = None
                        return int(response.status), answer
                except (OSError, http.client.HTTPException):
                    pass
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
                self.current = (self.current + 1) % len(self.urls)
        return 0, b""


class Node:
    def __init__(self, api: ApiClient, name: str, labels: dict[str, str],
                 addresses: list[dict[str, str]] | None = None) -> None:
        self.api, self.name, self.labels = api, name, labels
        self.addresses = addresses or []

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None,
              content_type: str = "application/json") -> int:
        # 0: no API server is up (yet): the next heartbeat tries again.
        return self.api.call(method, path, body, content_type)[0]

    def register(self) -> None:
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.name, "labels": {
                    "kubernetes.io/hostname": self.name, **self.labels}},
                "spec": {}, "status": {"addresses": self.addresses}}
        self._call("POST", "/api/v1/nodes", body)

    def report(self, ready: bool) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        condition = {"type": "Ready", "status": "True" if ready else "False",
                     "reason": "KubeletReady" if ready else "KubeletNotReady",
                     "lastHeartbeatTime": now, "lastTransitionTime": now,
                     "message": "lab engine " + ("running" if ready else "stopped")}
        # The kubelet posts its addresses with every status update (setters.go).
        status = self._call("PATCH", f"/api/v1/nodes/{self.name}/status",
                            {"status": {"conditions": [condition],
                                        "addresses": self.addresses}},
                            "application/merge-patch+json")
        if ready and status == 404:  # deleted, or the API restarted: register again
            self.register()
            self._call("PATCH", f"/api/v1/nodes/{self.name}/status",
                       {"status": {"conditions": [condition]}}, "application/merge-patch+json")


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
