"""The shape of every API answer the rollout uses, checked before it is used.

The API answers from a controller, and root on one controller decides what it says. A
field of the wrong type used as it comes (`"status": "garbage"`, a heartbeat without a
time zone) raised TypeError or AttributeError in the middle of a host's restart, which no
handler expected. Each check here looks at exactly the fields the rollout reads, and a
wrong one is an ApiShapeError naming the object and the field: one line, and the host
in progress takes the same path as any other failure (rolled back, recorded).
"""

from __future__ import annotations

import datetime
from typing import Any

from planner.errors import CargoshipError

Obj = dict[str, Any]


class ApiShapeError(CargoshipError):
    """An API answer without the shape cargoship uses."""

    def __init__(self, what: str, field: str, problem: str) -> None:
        self.what, self.field = what, field
        super().__init__(f"the API's answer for {what}: {field} {problem}")


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(value), type(value).__name__)


def _object(value: Any, what: str, field: str, *, optional: bool = True) -> Obj:
    if value is None and optional:
        return {}
    if not isinstance(value, dict):
        raise ApiShapeError(what, field, f"is {_kind(value)}, not an object")
    return value


def _list(value: Any, what: str, field: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ApiShapeError(what, field, f"is {_kind(value)}, not a list")
    return value


def _string(value: Any, what: str, field: str, *, optional: bool = True) -> None:
    if (value is None and optional) or isinstance(value, str):
        return
    raise ApiShapeError(what, field, f"is {_kind(value)}, not a string")


def _strings(value: Any, what: str, field: str) -> None:
    for key, item in _object(value, what, field).items():
        _string(item, what, f"{field}.{key}")


def timestamp(value: Any, what: str, field: str) -> datetime.datetime:
    """An RFC 3339 time as the API writes it (`2024-01-01T00:00:00Z`): with its zone."""
    if not isinstance(value, str):
        raise ApiShapeError(what, field, f"is {_kind(value)}, not a time")
    try:
        when = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ApiShapeError(what, field, f"is {value[:40]!r}, not a time") from None
    if when.tzinfo is None:
        raise ApiShapeError(what, field, f"is {value[:40]!r}, a time without a time zone")
    return when


def node(obj: Any, name: str) -> Obj:
    """A Node as the rollout reads it: metadata (name, resourceVersion, annotations,
    labels), spec.unschedulable, status.conditions (type, status, reason, message,
    lastHeartbeatTime)."""
    what = f"node {name}"
    top = _object(obj, what, "the answer", optional=False)
    meta = _object(top.get("metadata"), what, "metadata")
    _string(meta.get("name"), what, "metadata.name")
    _string(meta.get("resourceVersion"), what, "metadata.resourceVersion")
    _strings(meta.get("annotations"), what, "metadata.annotations")
    _strings(meta.get("labels"), what, "metadata.labels")
    spec = _object(top.get("spec"), what, "spec")
    if spec.get("unschedulable") is not None and not isinstance(spec["unschedulable"], bool):
        raise ApiShapeError(what, "spec.unschedulable",
                            f"is {_kind(spec['unschedulable'])}, not a boolean")
    status = _object(top.get("status"), what, "status")
    for i, address in enumerate(_list(status.get("addresses"), what, "status.addresses")):
        address = _object(address, what, f"status.addresses[{i}]", optional=False)
        _string(address.get("type"), what, f"status.addresses[{i}].type")
        _string(address.get("address"), what, f"status.addresses[{i}].address")
    for i, cond in enumerate(_list(status.get("conditions"), what, "status.conditions")):
        field = f"status.conditions[{i}]"
        cond = _object(cond, what, field, optional=False)
        for key in ("type", "status", "reason", "message"):
            _string(cond.get(key), what, f"{field}.{key}")
        if cond.get("type") == "Ready" and cond.get("lastHeartbeatTime") is not None:
            timestamp(cond["lastHeartbeatTime"], what, f"{field}.lastHeartbeatTime")
    return top


def pod(obj: Any, where: str) -> Obj:
    """A Pod as drain reads it: metadata (namespace, name, uid, annotations,
    ownerReferences), spec.volumes, status.phase."""
    top = _object(obj, f"a pod {where}", "the answer", optional=False)
    meta = _object(top.get("metadata"), f"a pod {where}", "metadata")
    for key in ("namespace", "name", "uid"):
        _string(meta.get(key), f"a pod {where}", f"metadata.{key}")
    what = f"pod {meta.get('namespace')}/{meta.get('name')}"
    _strings(meta.get("annotations"), what, "metadata.annotations")
    for i, ref in enumerate(_list(meta.get("ownerReferences"), what,
                                  "metadata.ownerReferences")):
        ref = _object(ref, what, f"metadata.ownerReferences[{i}]", optional=False)
        _string(ref.get("kind"), what, f"metadata.ownerReferences[{i}].kind")
    spec = _object(top.get("spec"), what, "spec")
    for i, volume in enumerate(_list(spec.get("volumes"), what, "spec.volumes")):
        _object(volume, what, f"spec.volumes[{i}]", optional=False)
    _string(_object(top.get("status"), what, "status").get("phase"), what, "status.phase")
    return top


def listing(obj: Any, what: str) -> tuple[list[Any], str]:
    """A list answer: its items (each to be checked by the caller) and resourceVersion."""
    top = _object(obj, what, "the answer", optional=False)
    meta = _object(top.get("metadata"), what, "metadata")
    _string(meta.get("resourceVersion"), what, "metadata.resourceVersion")
    return _list(top.get("items"), what, "items"), str(meta.get("resourceVersion") or "")
