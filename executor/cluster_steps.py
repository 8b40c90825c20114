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
from planner.plan.actions import LABELLED_ANNOTATION
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


def label_node(api: Any, node: str, key: str, host: str, addresses: frozenset[str],
               remove: bool = False) -> bool:
    """Set the label `key`=true (node-role.kubernetes.io/<profile>) on `host`'s node, and
    list it in the node's LABELLED_ANNOTATION (what cargoship set, and so may remove);
    with `remove`, take both away. False when there was nothing to do."""
    verb = "remove" if remove else "set"
    try:
        response = api.read_node(node, _request_timeout=10, _preload_content=False)
        read = api_shape.node(json.loads(response.data), node)
        node_identity.check(read, node, host, addresses)
        metadata = read.get("metadata") or {}
        current = metadata.get("labels") or {}
        listed = str((metadata.get("annotations") or {}).get(LABELLED_ANNOTATION) or "")
        owned = {k for k in listed.split(",") if k}
        changed = (key in current) if remove else (current.get(key) != "true")
        wanted = owned - {key} if remove else owned | {key}
        if not changed and wanted == owned:
            return False
        annotation = ",".join(sorted(wanted)) or None  # merge patch: null removes it
        patch: dict[str, Any] = {"annotations": {LABELLED_ANNOTATION: annotation}}
        if changed:
            patch["labels"] = {key: None if remove else "true"}
        api.patch_node(node, {"metadata": patch}, _request_timeout=10)
    except (api_shape.ApiShapeError, node_identity.NodeIdentityError):
        raise
    except Exception as exc:  # noqa: BLE001 - the client raises many types; one line out
        raise CargoshipError(f"node {node}: cannot {verb} label {key}: "
                             f"{getattr(exc, 'reason', None) or exc}") from None
    return changed


def owned_labels(api: Any, node: str, profile_labels: set[str]) -> set[str]:
    """The labels on `node` that cargoship set: listed in its LABELLED_ANNOTATION, or the
    label of a profile cluster.yaml names."""
    try:
        response = api.read_node(node, _request_timeout=10, _preload_content=False)
        metadata = api_shape.node(json.loads(response.data), node).get("metadata") or {}
    except api_shape.ApiShapeError:
        raise
    except Exception as exc:  # noqa: BLE001 - the client raises many types; one line out
        raise CargoshipError(f"node {node}: cannot read its labels: "
                             f"{getattr(exc, 'reason', None) or exc}") from None
    labels = metadata.get("labels") or {}
    listed = str((metadata.get("annotations") or {}).get(LABELLED_ANNOTATION) or "")
    return ({k for k in listed.split(",") if k} | profile_labels) & set(labels)
