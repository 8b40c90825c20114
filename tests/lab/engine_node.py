"""The stand-in engine's side of the cluster: its node in the lab's Kubernetes API.

Like a kubelet, it registers its node and keeps it Ready with a status heartbeat; when it
stops it just goes silent (the API's node grace period decides when the node reads
Unknown). Controllers also write the admin kubeconfig, as the real engine does at start.
Standard library only (it runs on the system Python in a lab host).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import time
import urllib.parse
from pathlib import Path
from typing import Any

HEARTBEAT = 10.0  # seconds, unless lab-timing.json says otherwise (spec.py Timing)


class Node:
    def __init__(self, api: str, token: str, name: str, labels: dict[str, str],
                 addresses: list[dict[str, str]] | None = None) -> None:
        self.api, self.token, self.name, self.labels = api, token, name, labels
        self.addresses = addresses or []
        # http.client, not urllib.request: the datastore speaks plain HTTP, and urllib's
        # imports are ~10 ms more of every engine start's CPU.
        url = urllib.parse.urlsplit(api)
        if url.scheme != "http" or url.hostname is None:
            raise ValueError(f"the lab's datastore is plain http://host:port, not {api}")
        self._address = (url.hostname, url.port or 80)

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None,
              content_type: str = "application/json") -> int:
        connection = http.client.HTTPConnection(*self._address, timeout=2)
        try:
            connection.request(
                method, path, body=json.dumps(body).encode() if body is not None else None,
                headers={"Authorization": f"Bearer {self.token}",
                         "Content-Type": content_type})
            response = connection.getresponse()
            response.read()
            return int(response.status)
        except (OSError, http.client.HTTPException):
            return 0  # the API is not up (yet): the caller tries again
        finally:
            connection.close()

    def register(self) -> None:
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.name, "labels": {
                    "kubernetes.io/hostname": self.name, **self.labels}},
                "spec": {}, "status": {"addresses": self.addresses}}
        self._call("POST", "/api/v1/nodes", body)

    def report(self, ready: bool) -> bool:
        """Post the node's status; False when it should be tried again soon (the API did
        not take it)."""
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
            status = self._call("PATCH", f"/api/v1/nodes/{self.name}/status",
                                {"status": {"conditions": [condition]}},
                                "application/merge-patch+json")
        return status == 200 or (status == 404 and not ready)  # a stopping node's is moot


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
