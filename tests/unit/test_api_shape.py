"""The shape checks of API answers: every field the rollout reads, a wrong one named."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from executor import api_shape
from executor.api_shape import ApiShapeError
from executor.readiness import ready_and_heartbeat

NODE: dict[str, Any] = {
    "metadata": {"name": "wrk-1", "resourceVersion": "12", "labels": {"a": "b"},
                 "annotations": {"cargoship.io/cordoned-by": "p"}},
    "spec": {"unschedulable": True},
    "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                               "lastHeartbeatTime": "2026-01-01T00:00:00Z"}]},
}
POD: dict[str, Any] = {
    "metadata": {"namespace": "db", "name": "db-0", "uid": "u",
                 "ownerReferences": [{"kind": "StatefulSet", "controller": True}]},
    "spec": {"volumes": [{"name": "x", "emptyDir": {}}]},
    "status": {"phase": "Running"},
}


def _with(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(obj)
    *parents, last = path.split(".")
    here: Any = changed
    for key in parents:
        here = here[int(key)] if key.isdigit() else here[key]
    here[int(last) if last.isdigit() else last] = value
    return changed


def test_well_formed_answers_pass_as_they_are() -> None:
    assert api_shape.node(NODE, "wrk-1") is NODE
    assert api_shape.pod(POD, "on node wrk-1") is POD
    assert api_shape.listing({"metadata": {"resourceVersion": "7"}, "items": [POD]},
                             "pods") == ([POD], "7")
    assert api_shape.node({}, "wrk-1") == {}  # nothing read is nothing wrong


@pytest.mark.parametrize(("path", "value", "said"), [
    ("status", "garbage", "status is a string, not an object"),
    ("metadata", [], "metadata is a list, not an object"),
    ("spec.unschedulable", "yes", "spec.unschedulable is a string, not a boolean"),
    ("status.conditions", {}, "status.conditions is an object, not a list"),
    ("status.conditions.0", "Ready", "status.conditions[0] is a string, not an object"),
    ("status.conditions.0.status", True, "status.conditions[0].status is a boolean"),
    ("status.conditions.0.lastHeartbeatTime", "2099-01-01T00:00:00",
     "status.conditions[0].lastHeartbeatTime is '2099-01-01T00:00:00', a time without a "
     "time zone"),
    ("status.conditions.0.lastHeartbeatTime", "soon", "is 'soon', not a time"),
    ("metadata.annotations", {"a": 1}, "metadata.annotations.a is int, not a string"),
])
def test_a_wrong_node_field_is_named(path: str, value: Any, said: str) -> None:
    with pytest.raises(ApiShapeError, match="the API's answer for node wrk-1: ") as caught:
        api_shape.node(_with(NODE, path, value), "wrk-1")
    assert said in str(caught.value)


@pytest.mark.parametrize(("path", "value", "said"), [
    ("metadata.name", 3, "metadata.name is int, not a string"),
    ("spec.volumes", "x", "pod db/db-0: spec.volumes is a string, not a list"),
    ("metadata.ownerReferences.0", None, "ownerReferences[0] is null, not an object"),
    ("status", 1, "status is int, not an object"),
])
def test_a_wrong_pod_field_is_named(path: str, value: Any, said: str) -> None:
    with pytest.raises(ApiShapeError) as caught:
        api_shape.pod(_with(POD, path, value), "on node wrk-1")
    assert said in str(caught.value)


def test_a_list_whose_items_are_no_list_is_named() -> None:
    with pytest.raises(ApiShapeError, match="items is an object, not a list"):
        api_shape.listing({"items": {"a": 1}}, "the pods of node wrk-1")


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=20)


@given(st.dictionaries(st.sampled_from(["metadata", "spec", "status", "x"]), JSON))
def test_any_json_is_either_accepted_and_readable_or_named(obj: dict[str, Any]) -> None:
    """Whatever the API sends, the check either names a field or the rollout's readers
    can read the answer without an exception of another type."""
    try:
        checked = api_shape.node(obj, "n")
    except ApiShapeError:
        return
    ready_and_heartbeat(checked)
