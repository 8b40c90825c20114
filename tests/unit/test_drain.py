"""The drain's pure helpers (executor/drain_pods.py, node_api.py) and NodeOps over a fake
API: pod classification, eviction body, API messages, what is still on the node, node
readiness. Built with the official client's model objects, then turned into the JSON the
API sends (drain reads its answers as plain JSON)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from executor.drain import CORDONED_BY, NodeOps
from executor.drain_pods import DrainOptions, EvictedPods, PodVerdict, classify_pod, eviction_body
from executor.node_api import DrainError, api_message
from executor.watch import WatchEvent
from planner.errors import CargoshipError


def pod(name: str = "web-1", ns: str = "default", owner: str | None = "ReplicaSet",
        controller: bool = True, phase: str | None = "Running", emptydir: bool = False,
        annotations: dict[str, str] | None = None, uid: str = "u1") -> dict[str, Any]:
    owners = [client.V1OwnerReference(api_version="apps/v1", kind=owner, name="o", uid="o",
                                      controller=controller)] if owner else None
    volumes = [client.V1Volume(name="cfg", config_map=client.V1ConfigMapVolumeSource(
        name="cfg"))]
    if emptydir:
        volumes.append(client.V1Volume(name="tmp", empty_dir=client.V1EmptyDirVolumeSource()))
    return as_json(client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, namespace=ns, uid=uid, owner_references=owners,
                                     annotations=annotations),
        spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="i")],
                              volumes=volumes),
        status=client.V1PodStatus(phase=phase)))


def as_json(model: Any) -> dict[str, Any]:
    """A model object as the API's JSON (camelCase keys, nothing unset)."""
    return json.loads(json.dumps(client.ApiClient().sanitize_for_serialization(model)))


DEFAULT = DrainOptions()


def test_a_controller_managed_pod_is_evicted() -> None:
    assert classify_pod(pod(), DEFAULT) == PodVerdict("default/web-1", "u1", "evict")


@pytest.mark.parametrize(("kwargs", "why"), [
    ({"phase": "Succeeded"}, "already Succeeded"),
    ({"phase": "Failed", "owner": None, "emptydir": True}, "already Failed"),
    ({"annotations": {"kubernetes.io/config.mirror": "x"}, "owner": None}, "mirror pod"),
    ({"owner": "DaemonSet", "emptydir": True}, "DaemonSet-managed"),
])
def test_skipped_pods(kwargs: dict[str, Any], why: str) -> None:
    verdict = classify_pod(pod(**kwargs), DEFAULT)
    assert (verdict.action, verdict.why) == ("skip", why)
    assert str(verdict) == f"default/web-1 ({why})"


def test_a_daemonset_that_is_not_the_controller_does_not_make_a_daemon_pod() -> None:
    verdict = classify_pod(pod(owner="DaemonSet", controller=False), DEFAULT)
    assert (verdict.action, verdict.why) == ("refuse", "not managed by a controller, needs force")


def test_emptydir_refused_unless_its_data_may_go() -> None:
    verdict = classify_pod(pod(emptydir=True), DEFAULT)
    assert (verdict.action, verdict.why) == ("refuse",
                                             "has emptyDir data, needs delete_emptydir_data")
    allowed = classify_pod(pod(emptydir=True), DrainOptions(delete_emptydir_data=True))
    assert allowed.action == "evict"
    assert classify_pod(pod(), DEFAULT).action == "evict"  # other volume kinds are fine


def test_unmanaged_refused_unless_forced_with_every_reason() -> None:
    verdict = classify_pod(pod(owner=None, emptydir=True), DEFAULT)
    assert verdict.why == ("has emptyDir data, needs delete_emptydir_data; "
                           "not managed by a controller, needs force")
    assert classify_pod(pod(owner=None), DrainOptions(force=True)).action == "evict"
    forced = classify_pod(pod(owner=None, emptydir=True), DrainOptions(force=True))
    assert forced.why == "has emptyDir data, needs delete_emptydir_data"


def test_eviction_body_carries_the_grace_period_only_when_set() -> None:
    body = eviction_body("db", "db-1", 30)
    assert body == as_json(client.V1Eviction(
        api_version="policy/v1", kind="Eviction",
        metadata=client.V1ObjectMeta(name="db-1", namespace="db"),
        delete_options=client.V1DeleteOptions(grace_period_seconds=30)))
    assert eviction_body("db", "db-1", 0)["deleteOptions"] == {"gracePeriodSeconds": 0}
    assert "deleteOptions" not in eviction_body("db", "db-1", -1)


def api_exception(status: int, body: object) -> ApiException:
    exc = ApiException(status=status, reason="Too Many Requests")
    exc.body = body if isinstance(body, str) else json.dumps(body)
    return exc


def test_api_message_includes_the_budget_named_in_the_causes() -> None:
    exc = api_exception(429, {
        "kind": "Status", "message": "Cannot evict pod as it would violate the pod's "
        "disruption budget.", "details": {"causes": [{"reason": "DisruptionBudget",
                                                     "message": "The disruption budget db-pdb "
                                                     "needs 2 healthy pods and has 2 currently"}]}})
    assert api_message(exc) == ("Cannot evict pod as it would violate the pod's disruption "
                                "budget. (The disruption budget db-pdb needs 2 healthy pods "
                                "and has 2 currently)")
    assert api_message(api_exception(404, {"message": 'pods "x" not found'})) == (
        'pods "x" not found')
    assert api_message(api_exception(502, "<html>bad gateway</html>")) == (
        "HTTP 502 Too Many Requests")


def raw_pod(name: str, ns: str = "default", uid: str = "u") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, "uid": uid}}


def test_evicted_pods_are_gone_by_name_and_uid() -> None:
    left = EvictedPods({"default/web-1": "u1", "db/db-1": "u2", "default/web-2": "u4"})
    listed = [raw_pod("web-1", uid="u1"), raw_pod("db-1", ns="db", uid="new"),
              raw_pod("other", uid="u3"), raw_pod("web-2", uid="u4")]
    # db-1 with another uid is a replacement, not the evicted pod.
    assert not left.seen(WatchEvent("SYNCED", {"items": listed}))
    assert left.pods == {"default/web-1": "u1", "default/web-2": "u4"}
    assert not left.seen(WatchEvent("MODIFIED", raw_pod("web-1", uid="u1")))  # terminating
    assert not left.seen(WatchEvent("DELETED", raw_pod("web-1", uid="u1")))
    assert left.pods == {"default/web-2": "u4"}
    assert left.seen(WatchEvent("ADDED", raw_pod("web-2", uid="u5")))  # a replacement


def node(*conditions: client.V1NodeCondition) -> dict[str, Any]:
    return as_json(client.V1Node(metadata=client.V1ObjectMeta(name="n"),
                                 status=client.V1NodeStatus(conditions=list(conditions) or None)))


def test_errors_are_one_line_cargoship_errors() -> None:
    error = DrainError("wrk-1", "eviction of db/db-1 failed: boom")
    assert isinstance(error, CargoshipError) and error.node == "wrk-1"
    assert str(error) == "node wrk-1: eviction of db/db-1 failed: boom"


class FlakyApi:
    """patch_node fails `failures` times with a 503, then succeeds."""

    def __init__(self, failures: int) -> None:
        self.failures, self.calls = failures, 0

    def patch_node(self, name: str, body: Any, **_: Any) -> Any:
        self.calls += 1
        if self.calls <= self.failures:
            raise ApiException(status=503, reason="Service Unavailable")
        return RawAnswer(b'{"kind": "Node"}')


class RawAnswer:
    """What the client returns with _preload_content=False: urllib3's response."""

    def __init__(self, data: bytes) -> None:
        self.data, self.released = data, False

    def release_conn(self) -> None:
        self.released = True


class AnsweringApi:
    def __init__(self, answer: bytes) -> None:
        self.answer = RawAnswer(answer)

    def read_node(self, name: str, **_: Any) -> Any:
        return self.answer


@pytest.mark.parametrize("answer", [b"<html>gateway</html>", b"[]", b""])
def test_an_answer_that_is_not_a_json_object_is_a_drain_error(answer: bytes) -> None:
    api = AnsweringApi(answer)
    with pytest.raises(DrainError) as failed:
        NodeOps(api).cordon("wrk-1")
    assert str(failed.value) == ("node wrk-1: reading the node failed: the API's answer is "
                                 "not a JSON object")
    assert api.answer.released  # the connection goes back to the pool all the same


def test_uncordon_is_retried_until_its_deadline() -> None:
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    retried: list[str] = []
    api = FlakyApi(failures=3)
    ops = NodeOps(api, clock=lambda: now[0], sleep=sleep)
    ops.uncordon_retrying("ctl-1", 60, lambda exc: retried.append(str(exc)))
    assert api.calls == 4 and len(retried) == 3
    assert "uncordon failed: HTTP 503 Service Unavailable" in retried[0]
    # Never past the deadline: the last error then.
    api = FlakyApi(failures=10_000)
    now[0] = 0.0
    with pytest.raises(DrainError, match="uncordon failed"):
        NodeOps(api, clock=lambda: now[0], sleep=sleep).uncordon_retrying("ctl-1", 30)
    assert 30 <= now[0] < 33 and api.calls > 5


class NodeApi:
    """One node, with resourceVersion preconditions on its patches, as the API has."""

    def __init__(self, unschedulable: bool = False) -> None:
        self.node: dict[str, Any] = {"metadata": {"name": "wrk-1", "resourceVersion": "1"},
                                     "spec": {"unschedulable": unschedulable}}
        self.reads = self.patches = 0

    def touch(self) -> None:  # a heartbeat or another client
        self.node["metadata"]["resourceVersion"] = str(int(
            self.node["metadata"]["resourceVersion"]) + 1)

    def read_node(self, name: str, **_: Any) -> RawAnswer:
        self.reads += 1
        return RawAnswer(json.dumps(self.node).encode())

    def patch_node(self, name: str, body: dict[str, Any], **_: Any) -> RawAnswer:
        self.patches += 1
        wanted = body["metadata"].get("resourceVersion")
        if wanted is not None and wanted != self.node["metadata"]["resourceVersion"]:
            raise ApiException(status=409, reason="Conflict")
        self.node["spec"].update(body["spec"])
        self.node["metadata"].setdefault("annotations", {}).update(
            body["metadata"].get("annotations") or {})
        self.touch()
        return RawAnswer(json.dumps(self.node).encode())


def test_a_cordon_given_the_node_just_read_is_one_patch() -> None:
    api = NodeApi()
    ops = NodeOps(api)
    assert ops.cordon("wrk-1", owner="plan-1", read=ops.read_node("wrk-1")) is True
    assert (api.reads, api.patches) == (1, 1)
    assert api.node["spec"]["unschedulable"] is True
    assert api.node["metadata"]["annotations"] == {CORDONED_BY: "plan-1"}


def test_a_cordon_given_a_node_changed_since_reads_it_again() -> None:
    api = NodeApi()
    ops = NodeOps(api)
    read = ops.read_node("wrk-1")
    api.touch()  # the kubelet posted its status in between
    assert ops.cordon("wrk-1", owner="plan-1", read=read) is True
    assert (api.reads, api.patches) == (2, 2)  # one conflict, then read and patched again
    assert api.node["spec"]["unschedulable"] is True


def test_a_node_someone_else_cordoned_is_left_to_them() -> None:
    api = NodeApi(unschedulable=True)
    ops = NodeOps(api)
    assert ops.cordon("wrk-1", owner="plan-1", read=ops.read_node("wrk-1")) is False
    assert (api.reads, api.patches) == (2, 0)  # asked again before leaving it to them


def test_a_node_uncordoned_since_it_was_read_is_cordoned() -> None:
    """The read ahead said cordoned by someone else; they gave it back meanwhile."""
    api = NodeApi(unschedulable=True)
    ops = NodeOps(api)
    read = ops.read_node("wrk-1")
    api.node["spec"]["unschedulable"] = False
    api.touch()
    assert ops.cordon("wrk-1", owner="plan-1", read=read) is True
    assert api.node["spec"]["unschedulable"] is True
    assert api.node["metadata"]["annotations"] == {CORDONED_BY: "plan-1"}


def test_a_budgets_selector_as_the_api_matches_it() -> None:
    from planner.drain_rules import selects

    labels = {"app": "dns", "tier": "core"}
    assert selects({}, labels)  # policy/v1: empty selects all
    assert not selects(None, labels)  # missing: none
    assert selects({"matchLabels": {"app": "dns"}}, labels)
    assert not selects({"matchLabels": {"app": "web"}}, labels)
    assert selects({"matchExpressions": [{"key": "tier", "operator": "In",
                                          "values": ["core", "x"]}]}, labels)
    assert not selects({"matchExpressions": [{"key": "tier", "operator": "NotIn",
                                              "values": ["core"]}]}, labels)
    assert selects({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}, labels)
    assert not selects({"matchExpressions": [{"key": "zone", "operator": "Exists"}]}, labels)


class ServerApi:
    """One controller's API server: patch_node answers `status` (0: the node) or raises
    `raises`; every call is recorded in `log` under `name`."""

    def __init__(self, name: str, log: list[str], status: int = 0,
                 raises: Exception | None = None) -> None:
        self.name, self.log, self.status, self.raises = name, log, status, raises

    def patch_node(self, name: str, body: Any, **_: Any) -> Any:
        self.log.append(self.name)
        if self.raises is not None:
            raise self.raises
        if self.status:
            raise ApiException(status=self.status, reason="Trouble")
        return RawAnswer(b'{"kind": "Node"}')


@pytest.mark.parametrize("trouble", [
    {"status": 503}, {"status": 500}, {"status": 504},
    {"raises": ConnectionRefusedError("connection refused")}])
def test_a_request_one_api_server_cannot_carry_goes_to_the_next_which_is_then_asked_first(
        trouble: dict[str, Any]) -> None:
    calls: list[str] = []
    ctl1 = ServerApi("ctl-1", calls, **trouble)
    ops = NodeOps(ctl1, others=[ServerApi("ctl-2", calls), ServerApi("ctl-3", calls)])
    ops.uncordon("ctl-2")
    assert calls == ["ctl-1", "ctl-2"]
    ops.uncordon("ctl-2")  # ctl-2 answered: asked first from now on
    assert calls == ["ctl-1", "ctl-2", "ctl-2"]


@pytest.mark.parametrize("status", [400, 403, 404, 409, 422, 429])
def test_a_refusal_of_the_request_itself_is_not_asked_again_elsewhere(status: int) -> None:
    calls: list[str] = []
    ops = NodeOps(ServerApi("ctl-1", calls, status=status),
                  others=[ServerApi("ctl-2", calls)])
    with pytest.raises(DrainError, match=f"uncordon failed: HTTP {status} Trouble$"):
        ops.uncordon("wrk-1")
    assert calls == ["ctl-1"]


def test_when_every_api_server_fails_the_error_says_the_first_and_the_last() -> None:
    calls: list[str] = []
    ops = NodeOps(ServerApi("ctl-1", calls, status=503),
                  others=[ServerApi("ctl-2", calls, raises=OSError("no route to host")),
                          ServerApi("ctl-3", calls, status=500)])
    with pytest.raises(DrainError) as failed:
        ops.uncordon("ctl-2")
    assert calls == ["ctl-1", "ctl-2", "ctl-3"]
    assert str(failed.value) == ("node ctl-2: uncordon failed: HTTP 503 Trouble (and through "
                                 "2 other API server(s): HTTP 500 Trouble)")


def test_after_a_second_interrupt_no_other_api_server_is_asked() -> None:
    calls: list[str] = []
    ops = NodeOps(ServerApi("ctl-1", calls, raises=OSError("cut off")),
                  others=[ServerApi("ctl-2", calls)])
    ops.interrupt()
    with pytest.raises(DrainError, match="API unreachable: cut off"):
        ops.uncordon("wrk-1")
    assert calls == ["ctl-1"]
