"""The cluster-wide steps after the rollout: the local kubeconfig and node labels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from planner.config.model import ClusterConfig
from planner.errors import CargoshipError
from planner.kube import merge, named_entries
from planner.localfiles import atomic_write
from planner.safeyaml import safe_load

from . import api_shape, node_identity


def merge_kubeconfig(config: ClusterConfig, admin: dict[str, Any], path: Path | None = None,
                     name: str | None = None) -> Path:
    """kubectl-compatible merge as a named context; mode 0600; other contexts kept.
    Path and context default to the config's."""
    path = path or config.options.kubeconfig_path.expanduser()
    name = name or config.options.kubeconfig_context or config.name
    local = None
    if path.exists():
        try:
            local = safe_load(path.read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise CargoshipError(f"cannot read local kubeconfig {path}: {exc}") from None
    merged = merge(local if isinstance(local, dict) else None, named_entries(admin, name))
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(merged, sort_keys=False, default_flow_style=False)
    atomic_write(path, text.encode(), mode=0o600)  # it holds credentials
    return path


def label_node(api: Any, node: str, key: str, host: str, addresses: frozenset[str]) -> bool:
    """Set the label `key`=true (node-role.kubernetes.io/<profile>) on `host`'s node;
    False when it already was."""
    try:
        response = api.read_node(node, _request_timeout=10, _preload_content=False)
        read = api_shape.node(json.loads(response.data), node)
        node_identity.check(read, node, host, addresses)
        current = (read.get("metadata") or {}).get("labels") or {}
        if current.get(key) == "true":
            return False
        api.patch_node(node, {"metadata": {"labels": {key: "true"}}}, _request_timeout=10)
    except (api_shape.ApiShapeError, node_identity.NodeIdentityError):
        raise
    except Exception as exc:  # noqa: BLE001 - the client raises many types; one line out
        raise CargoshipError(f"node {node}: cannot set label {key}: "
                             f"{getattr(exc, 'reason', None) or exc}") from None
    return True
