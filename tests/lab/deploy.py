"""The lab's stand-in for the engine's deploy controller (k3s pkg/deploy/controller.go,
which rke2 runs too): what it does with the files in <data-dir>/server/manifests.

* It walks the directory recursively (filepath.Walk: every subdirectory, links to
  directories not followed) and reads every `.yaml`, `.yml` and `.json` file, unless a
  `<file>.skip` beside it says to leave that file alone.
* Each file is an AddOn, named after the file without its extension; its objects are
  applied with the AddOn as their owner. When the file's content changes, objects it
  applied before and no longer holds are deleted (apply's prune: an emptied file prunes
  them all).
* A file deleted from the directory is not an AddOn change: the objects it applied stay
  (the documented behaviour: deleting a manifest does not remove its resources).

The lab's API serves HelmChartConfig (helm.cattle.io/v1) of the kinds a manifest may
hold, so that is what is applied; the owner is kept in an annotation (the real one keeps
objectset labels and an ownerReference to the AddOn). Standard library and python3-yaml
only; imports nothing from the repository.
"""

from __future__ import annotations

import http.client
import json
import os
import threading
import urllib.parse
from pathlib import Path
from typing import Any

import yaml

OWNER = "objectset.rio.cattle.io/owner-name"
SUFFIXES = (".yaml", ".yml", ".json")
RESOURCE = "/apis/helm.cattle.io/v1/namespaces/{ns}/helmchartconfigs"


def addon_files(manifests: Path) -> dict[str, Path]:
    """AddOn name -> its file, as the controller lists them."""
    found: dict[str, Path] = {}
    for root, _dirs, files in os.walk(manifests, followlinks=False):
        for name in sorted(files):
            path = Path(root) / name
            if name.lower().endswith(SUFFIXES) and not Path(f"{path}.skip").exists():
                found[path.name.rsplit(".", 1)[0]] = path
    return found


def objects(path: Path) -> list[dict[str, Any]]:
    try:
        docs = list(yaml.safe_load_all(path.read_text()))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return []  # the real controller logs it and retries; nothing is applied or pruned
    return [d for d in docs if isinstance(d, dict) and d.get("kind") == "HelmChartConfig"]


class DeployController:
    def __init__(self, api: str, token: str, manifests: Path) -> None:
        url = urllib.parse.urlsplit(api)
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 80
        self.token, self.manifests = token, manifests
        self.seen: dict[str, float] = {}  # AddOn -> the mtime last applied

    def _call(self, method: str, path: str, body: Any = None,
              content_type: str = "application/json") -> tuple[int, Any]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=5)
        try:
            conn.request(method, path, json.dumps(body) if body is not None else None,
                         {"Authorization": f"Bearer {self.token}",
                          "Content-Type": content_type})
            response = conn.getresponse()
            data = response.read()
            return response.status, json.loads(data or b"null")
        finally:
            conn.close()

    def sync_once(self) -> None:
        for addon, path in addon_files(self.manifests).items():
            try:
                mtime = path.stat().st_mtime
            except OSError:
                continue
            if self.seen.get(addon) == mtime:
                continue
            self._apply(addon, objects(path))
            self.seen[addon] = mtime

    def _apply(self, addon: str, wanted: list[dict[str, Any]]) -> None:
        keep = set()
        for obj in wanted:
            meta = obj.get("metadata") or {}
            ns, name = str(meta.get("namespace") or "kube-system"), str(meta.get("name"))
            keep.add((ns, name))
            body = {**obj, "metadata": {**meta, "namespace": ns, "annotations": {
                **(meta.get("annotations") or {}), OWNER: addon}}}
            base = RESOURCE.format(ns=ns)
            status, _ = self._call("GET", f"{base}/{name}")
            if status == 404:
                self._call("POST", base, body)
            else:
                self._call("PATCH", f"{base}/{name}", {"metadata": body["metadata"],
                                                       "spec": obj.get("spec") or {}},
                           "application/merge-patch+json")
        status, listing = self._call("GET", "/apis/helm.cattle.io/v1/helmchartconfigs")
        for item in (listing or {}).get("items", []) if status == 200 else []:
            meta = item.get("metadata") or {}
            if (meta.get("annotations") or {}).get(OWNER) == addon and \
                    (meta.get("namespace"), meta.get("name")) not in keep:
                self._call("DELETE", f"{RESOURCE.format(ns=meta['namespace'])}/"
                                     f"{meta['name']}")

    def run(self, stop: threading.Event, every: float = 0.3) -> None:
        while not stop.wait(every):
            try:
                self.sync_once()
            except OSError:
                pass  # the API is down for a moment: next round
