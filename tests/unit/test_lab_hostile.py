"""The lab API stand-in's hostile answers (tests/lab/kubeapi_hostile*.py), without a server:
which requests a fault meets, how `set` paths change an answer, and that huge answers are
valid JSON of exactly the size asked for."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.lab.lab import API_FAULT_KINDS, API_FAULT_MODES

LAB = Path(__file__).resolve().parents[1] / "lab"
# The lab's API modules import their siblings by name, as they run on a lab host.
sys.path.insert(0, str(LAB))
try:
    import kubeapi_hostile as hostile
    import kubeapi_hostile_serve as serve
    from kubeapi_store import ApiError
finally:
    sys.path.remove(str(LAB))

NODE = {"kind": "Node", "apiVersion": "v1", "metadata": {"name": "ctl-1"},
        "status": {"conditions": [
            {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": "t0"},
            {"type": "Ready", "status": "True", "lastHeartbeatTime": "t0"}]}}


def test_the_lab_offers_the_kinds_and_modes_the_api_knows() -> None:
    assert API_FAULT_KINDS == hostile.KINDS and API_FAULT_MODES == hostile.MODES


def test_set_paths_keys_indexes_selectors_and_escaped_dots() -> None:
    assert hostile.steps(r"status.conditions[type=Ready].lastHeartbeatTime") == [
        "status", "conditions", ("type", "Ready"), "lastHeartbeatTime"]
    assert hostile.steps(r"metadata.annotations.a\.io/b") == ["metadata", "annotations",
                                                              "a.io/b"]
    assert hostile.steps("items.-1") == ["items", -1]
    shaped = hostile.shape(NODE, {"set": {
        "status.conditions[type=Ready].lastHeartbeatTime": "2099-01-01T00:00:00",
        "status.conditions.0.status": "Unknown", "metadata.labels.x": "1",
        "status.conditions[type=Gone].status": "True"}})  # no such element: left alone
    ready = shaped["status"]["conditions"][1]
    assert ready == {"type": "Ready", "status": "True", "lastHeartbeatTime": "2099-01-01T00:00:00"}
    assert shaped["status"]["conditions"][0]["status"] == "Unknown"
    assert shaped["metadata"]["labels"] == {"x": "1"}
    assert len(shaped["status"]["conditions"]) == 2
    assert NODE["status"]["conditions"][1]["lastHeartbeatTime"] == "t0"  # a copy changed
    assert hostile.shape(NODE, {"set": {"status": "garbage"}})["status"] == "garbage"
    assert "status" not in hostile.shape(NODE, {"unset": ["status"]})
    assert hostile.shape(NODE, {"set": {"$": [1]}}) == [1]


@pytest.mark.parametrize(("spec", "expected"), [
    ("%Y-%m-%dT%H:%M:%S", "2026-01-02T03:04:05"),
    ("epoch", 1767323045),
    ({"shift": -3600}, "2026-01-02T02:04:05Z"),
])
def test_retime_rewrites_the_real_time_and_leaves_anything_else(spec: Any,
                                                                expected: Any) -> None:
    node = {"status": {"conditions": [{"type": "Ready", "lastHeartbeatTime":
                                       "2026-01-02T03:04:05Z"}], "other": "not a time"}}
    shaped = hostile.shape(node, {"retime": {
        "status.conditions[type=Ready].lastHeartbeatTime": spec, "status.other": "%Y",
        "status.absent": "%Y"}})
    assert shaped["status"]["conditions"][0]["lastHeartbeatTime"] == expected
    assert shaped["status"]["other"] == "not a time" and "absent" not in shaped["status"]


def test_shape_applies_to_each_list_item_or_event_object_and_dollar_to_the_whole() -> None:
    listing = {"kind": "NodeList", "metadata": {}, "items": [NODE, NODE]}
    shaped = hostile.shape(listing, {"set": {"status": "garbage", "$.metadata.x": 1}})
    assert [i["status"] for i in shaped["items"]] == ["garbage", "garbage"]
    assert shaped["metadata"] == {"x": 1}
    event = hostile.shape({"type": "MODIFIED", "object": NODE},
                          {"set": {"spec": None, "$.type": "BOGUS"}}, event=True)
    assert event["type"] == "BOGUS" and event["object"]["spec"] is None


class Store:
    def get(self, kind: Any, ns: str, name: str) -> dict[str, Any]:
        if name != "web-1":
            raise ApiError(404, "NotFound", "no")
        return {"spec": {"nodeName": "wrk-1"}}


@pytest.mark.parametrize(("method", "path", "query", "expected"), [
    ("GET", "/api/v1/nodes/ctl-1", {}, ("read-node", "ctl-1")),
    ("PATCH", "/api/v1/nodes/ctl-1", {}, ("patch-node", "ctl-1")),
    ("PATCH", "/api/v1/nodes/ctl-1/status", {}, None),
    ("GET", "/api/v1/nodes", {}, ("list-nodes", None)),
    ("GET", "/api/v1/nodes", {"watch": "1", "fieldSelector": "metadata.name=ctl-1"},
     ("watch-nodes", "ctl-1")),
    ("GET", "/api/v1/pods", {"fieldSelector": "status.phase!=Failed,spec.nodeName==wrk-1"},
     ("list-pods", "wrk-1")),
    ("GET", "/api/v1/namespaces/ns/pods", {"watch": "true"}, ("watch-pods", None)),
    ("POST", "/api/v1/namespaces/ns/pods/web-1/eviction", {}, ("evict", "wrk-1")),
    ("POST", "/api/v1/namespaces/ns/pods/gone/eviction", {}, ("evict", None)),
    ("GET", "/apis/policy/v1/poddisruptionbudgets", {}, None),
])
def test_requests_are_classified_with_the_node_they_name(method: str, path: str,
                                                         query: dict[str, str],
                                                         expected: Any) -> None:
    assert hostile.classify(method, path, query, Store()) == expected  # type: ignore[arg-type]


def test_faults_meet_front_end_requests_naming_their_node_times_times() -> None:
    faults = hostile.Faults()
    faults.add({"kind": "read-node", "mode": "shape", "node": "ctl-1", "times": 2})
    faults.add({"kind": "readyz", "mode": "slow", "node": None, "times": None})
    faults.add({"method": "PATCH", "path": "/api/v1/nodes/ctl-1", "code": 503})  # an error
    via = {hostile.FRONT_END: "ctl-2"}

    def take(path: str, headers: dict[str, str]) -> Any:
        return faults.take_hostile("GET", path, {}, headers, None)

    assert take("/api/v1/nodes/ctl-1", {}) is None  # not through a front end
    assert take("/api/v1/nodes/ctl-2", via) is None  # another node
    assert take("/api/v1/nodes/ctl-1", via)["request_node"] == "ctl-1"
    assert take("/api/v1/nodes/ctl-1", via) is not None
    assert take("/api/v1/nodes/ctl-1", via) is None  # used up
    for _ in range(3):  # until cleared
        assert take("/version", {**via, hostile.CHECK: "readyz"})["request_node"] == "ctl-2"
    assert faults.take_error("PATCH", "/api/v1/nodes/ctl-1", {})["code"] == 503
    assert faults.clear() == 1
    with pytest.raises(ApiError, match="unknown fault mode"):
        faults.add({"kind": "read-node", "mode": "sideways"})
    with pytest.raises(ApiError, match="times"):
        faults.add({"kind": "read-node", "mode": "slow", "times": 0})


def joined(pieces: Any) -> bytes:
    return b"".join(pieces)


@pytest.mark.parametrize("kind", ["read-node", "patch-node", "list-nodes", "list-pods",
                                  "watch-pods", "watch-nodes", "evict"])
def test_huge_answers_are_valid_json_of_the_size_asked(kind: str) -> None:
    real: dict[str, Any] = dict(NODE)
    if kind.startswith(("list-", "watch-")):
        pod = {"metadata": {"name": "web-1"}, "spec": {"nodeName": "wrk-1"}}
        real = {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"},
                "items": [pod] if kind != "watch-pods" else []}
    for size in (200_000, 1_234_567):
        total, pieces = serve._huge(kind, real, size, "wrk-1", None)
        data = joined(pieces)
        assert total == len(data) == size
        answer = json.loads(data)
        if kind == "list-pods":
            assert answer["items"][0]["metadata"]["name"] == "web-1"
            generated = answer["items"][1:]
            assert len(generated) > 100
            assert {p["spec"]["nodeName"] for p in generated} == {"wrk-1"}
            assert len({p["metadata"]["uid"] for p in generated}) == len(generated)
        elif kind.startswith("watch-"):
            assert data.count(b"\n") == 1 and answer["type"] == "ADDED"


def test_huge_readyz_and_a_size_below_the_real_answer() -> None:
    total, pieces = serve._huge("readyz", {"body": "ok\n"}, 10_000, "", None)
    data = joined(pieces)
    assert total == len(data) == 10_000 and data.endswith(b"ok\n")
    total, pieces = serve._huge("read-node", NODE, 10, "", None)
    assert total == len(joined(pieces)) > 10  # the real answer, padding empty


def test_endless_prefixes_are_json_prefixes() -> None:
    listing = {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": []}
    assert serve._prefix("list-pods", listing) == (b'{"kind": "PodList", "apiVersion": "v1", '
                                                   b'"metadata": {}, "items": [')
    assert serve._prefix("read-node", NODE) == b'{"kind": "Node", "apiVersion": "v1", ' \
        b'"metadata": '
    assert serve._prefix("watch-nodes", listing) == b'{"type": "ADDED", "object": '
