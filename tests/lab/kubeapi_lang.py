"""The request languages of the lab's Kubernetes API stand-in: label and field selectors,
merge, strategic merge and JSON patches. Standard library only (runs on a lab host's
system Python), imported by kubeapi.py.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

from kubeapi_store import ApiError, Kind, Obj, Patcher, Requirement, bad_request, labels_match

# Strategic merge patch merges these lists by key instead of replacing them (the
# patchMergeKey tags of the Go types the lab's clients patch).
MERGE_KEYS = {"conditions": "type", "addresses": "type", "containers": "name",
              "volumes": "name", "env": "name", "ownerReferences": "uid"}
FIELDS = {"nodes": {"metadata.name", "spec.unschedulable"},
          "pods": {"metadata.name", "metadata.namespace", "spec.nodeName", "spec.restartPolicy",
                   "spec.schedulerName", "spec.serviceAccountName", "spec.hostNetwork",
                   "status.phase", "status.podIP", "status.nominatedNodeName"},
          "poddisruptionbudgets": {"metadata.name", "metadata.namespace"}}


# --- request languages: selectors and patches ---------------------------------

_LABEL_REQ = re.compile(r"(?P<neg>!)?\s*(?P<key>[\w./-]+)\s*(?:(?P<op>==|=|!=)\s*"
                        r"(?P<value>[\w.-]*)|(?<=\s)(?P<set>in|notin)\s*\((?P<values>[^)]*)\))?")


def parse_label_selector(text: str) -> list[Requirement]:
    """`a=b,c!=d,e,!f,g in (h,i),j notin (k)`: the real selector grammar, minus `<`/`>`."""
    reqs: list[Requirement] = []
    for part in re.findall(r"(?:[^,(]|\([^)]*\))+", text) if text.strip() else []:
        m = _LABEL_REQ.fullmatch(part.strip())
        if not m or (m["neg"] and (m["op"] or m["set"])):
            raise bad_request(f"unable to parse requirement: {part.strip()!r}")
        if m["set"]:
            values = frozenset(v.strip() for v in m["values"].split(",") if v.strip())
            reqs.append((m["key"], m["set"], values))
        elif m["op"]:
            reqs.append((m["key"], "!=" if m["op"] == "!=" else "=", frozenset([m["value"]])))
        else:
            reqs.append((m["key"], "!" if m["neg"] else "exists", frozenset()))
    return reqs


def parse_field_selector(text: str, kind: Kind) -> list[tuple[str, bool, str]]:
    """`spec.nodeName=x,status.phase!=Succeeded` as (field, equal, value) triples."""
    out = []
    for part in text.split(",") if text.strip() else []:
        m = re.fullmatch(r"\s*([\w.]+)\s*(==|=|!=)\s*(\S*)\s*", part)
        if not m:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        # Every other kind: the fields every resource has (k8s.io/apiserver
        # pkg/registry/generic: DefaultNamespaceScopedAttr, DefaultClusterScopedAttr).
        known = FIELDS.get(kind.resource) or (
            {"metadata.name", "metadata.namespace"} if kind.namespaced else {"metadata.name"})
        if m[1] not in known:
            raise bad_request(f"field label not supported: {m[1]}")
        out.append((m[1], m[2] != "!=", m[3]))
    return out


def selector(kind: Kind, query: dict[str, str]) -> Callable[[Obj], bool]:
    labels = parse_label_selector(query.get("labelSelector", ""))
    fields = parse_field_selector(query.get("fieldSelector", ""), kind)
    return lambda obj: (labels_match(obj["metadata"].get("labels") or {}, labels)
                        and all((field_value(obj, f) == v) == eq for f, eq, v in fields))


def field_value(obj: Obj, path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def patcher(ctype: str, patch: Any) -> Patcher:
    """The patch function for a PATCH request's content type."""
    if ctype == "application/json-patch+json":
        return lambda obj: json_patch(obj, patch)
    if ctype not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
        raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown "
                       "format - accepted media types include: application/json-patch+json, "
                       "application/merge-patch+json, application/strategic-merge-patch+json")
    if not isinstance(patch, dict):
        raise bad_request("the body of the request was in an unknown format - "
                          "a merge patch must be a JSON object")
    return lambda obj: merge_patch(obj, patch, strategic="strategic" in ctype)


def merge_patch(target: Any, patch: Any, strategic: bool = False) -> Any:
    """RFC 7386 (null deletes a key); `strategic` also merges MERGE_KEYS lists by key and
    drops `$` directives, which is all of strategic merge the lab's clients send."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if strategic and key.startswith("$"):
            continue  # $setElementOrder/$retainKeys only order or prune what we merge anyway
        if value is None:
            result.pop(key, None)
        elif strategic and key in MERGE_KEYS and isinstance(value, list):
            result[key] = _merge_list(result.get(key) or [], value, MERGE_KEYS[key])
        else:
            result[key] = merge_patch(result.get(key), value, strategic)
    return result


def _merge_list(old: list[Any], patch: list[Any], key: str) -> list[Any]:
    out = copy.deepcopy(old)
    for item in patch:
        if not isinstance(item, dict):
            raise bad_request(f"unable to find api field in struct for merge key {key!r}")
        at = next((i for i, o in enumerate(out) if o.get(key) == item.get(key)), None)
        if item.get("$patch") == "delete":
            if at is not None:
                del out[at]
        elif at is None:
            out.append(merge_patch({}, item, strategic=True))
        else:
            out[at] = merge_patch(out[at], item, strategic=True)
    return out


def json_patch(doc: Obj, ops: Any) -> Obj:
    """RFC 6902 add/replace/remove/test; failures are 422 as from the real API."""
    if not isinstance(ops, list) or not all(isinstance(op, dict) for op in ops):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc = copy.deepcopy(doc)
    for op in ops:
        kind, path = op.get("op"), op.get("path")
        if kind not in ("add", "replace", "remove", "test") or not isinstance(path, str):
            raise bad_request(f"Unexpected kind: {kind}")
        if not path.startswith("/"):
            raise ApiError(422, "Invalid", f"{kind} operation does not apply: path {path!r}")
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]
        parent: Any = doc
        for token in tokens[:-1]:
            parent = _step(parent, token, kind, path)
        last = tokens[-1]
        at: Any  # the list index or the mapping key the operation works on
        if isinstance(parent, list):
            size = len(parent) + (1 if kind == "add" else 0)
            if not (last == "-" and kind == "add") and not (last.isdigit() and int(last) < size):
                raise ApiError(422, "Invalid", f"{kind} operation does not apply: "
                               f"index out of range: {path}")
            at = len(parent) if last == "-" else int(last)
        elif isinstance(parent, dict):
            if kind != "add" and last not in parent:
                raise ApiError(422, "Invalid", f"{kind} operation does not apply: "
                               f"doc is missing key: {path}: missing value")
            at = last
        else:
            raise ApiError(422, "Invalid", f"{kind} operation does not apply: "
                           f"doc is missing path: {path}: missing value")
        if kind == "test" and parent[at] != op.get("value"):
            raise ApiError(422, "Invalid", f"testing value {path} failed: test failed")
        if kind == "remove":
            del parent[at]
        elif kind == "add" and isinstance(parent, list):
            parent.insert(at, copy.deepcopy(op.get("value")))
        elif kind in ("add", "replace"):
            parent[at] = copy.deepcopy(op.get("value"))
    return doc


def _step(node: Any, token: str, kind: str, path: str) -> Any:
    if isinstance(node, dict) and token in node:
        return node[token]
    if isinstance(node, list) and token.isdigit() and int(token) < len(node):
        return node[int(token)]
    raise ApiError(422, "Invalid", f"{kind} operation does not apply: "
                   f"doc is missing path: {path}: missing value")
