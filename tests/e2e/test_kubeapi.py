"""The lab's Kubernetes API stand-in (tests/lab/kubeapi.py), run as a real server on the
system Python and driven over HTTP by the official `kubernetes` client."""

from __future__ import annotations

import http.client
import json
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.kubeapi_server import TOKEN, Kube, connect, poll


@pytest.fixture
def kube(start_kubeapi: Callable[..., Kube]) -> Kube:
    return start_kubeapi()


def status_body(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    assert body["kind"] == "Status" and body["apiVersion"] == "v1"
    assert body["status"] == "Failure" and body["code"] == exc.status
    return body


def make_node(name: str, **labels: str) -> client.V1Node:
    return client.V1Node(metadata=client.V1ObjectMeta(name=name, labels=labels or None))


def make_pod(name: str, node: str, ns: str = "default", phase: str | None = None,
             labels: dict[str, str] | None = None, owner: str | None = None,
             annotations: dict[str, str] | None = None) -> client.V1Pod:
    owners = [client.V1OwnerReference(api_version="apps/v1", kind=owner, name=f"{name}-owner",
                                      uid=f"uid-{name}", controller=True)] if owner else None
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, namespace=ns, labels=labels,
                                     owner_references=owners, annotations=annotations),
        spec=client.V1PodSpec(node_name=node,
                              containers=[client.V1Container(name="main", image="busybox")]),
        status=client.V1PodStatus(phase=phase) if phase else None)


def evict(kube: Kube, name: str, ns: str = "default") -> int:
    """POST an Eviction; the HTTP code. The body is checked raw: the client's declared return
    type (V1Eviction, from the OpenAPI spec) has no field for a Status's `status`."""
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=ns))
    response = kube.core.create_namespaced_pod_eviction(name, ns, eviction,
                                                        _preload_content=False)
    assert json.loads(response.data) == {"kind": "Status", "apiVersion": "v1",
                                         "metadata": {}, "status": "Success"}
    code: int = response.status
    return code


def names(items: list[Any]) -> list[str]:
    return [item.metadata.name for item in items]


def test_nodes_create_list_get_and_selectors(kube: Kube) -> None:
    created = kube.core.create_node(make_node("ctl-1", role="controller"))
    assert created.metadata.uid and created.metadata.creation_timestamp
    assert int(created.metadata.resource_version) > 0
    kube.core.create_node(make_node("wrk-2", role="worker", gpu="a100"))
    kube.core.create_node(make_node("wrk-1", role="worker"))

    listing = kube.core.list_node()
    assert names(listing.items) == ["ctl-1", "wrk-1", "wrk-2"]
    assert int(listing.metadata.resource_version) >= 3
    assert kube.core.read_node("wrk-2").metadata.labels == {"role": "worker", "gpu": "a100"}

    def selected(**kwargs: Any) -> list[str]:
        return names(kube.core.list_node(**kwargs).items)

    assert selected(label_selector="role=worker") == ["wrk-1", "wrk-2"]
    assert selected(label_selector="role==worker,gpu") == ["wrk-2"]
    assert selected(label_selector="role!=worker") == ["ctl-1"]
    assert selected(label_selector="role=worker,!gpu") == ["wrk-1"]
    assert selected(label_selector="role in (controller, worker),gpu notin (a100)") == [
        "ctl-1", "wrk-1"]
    assert selected(field_selector="metadata.name=wrk-1") == ["wrk-1"]
    page = kube.core.list_node(limit=2)
    assert names(page.items) == ["ctl-1", "wrk-1"] and page.metadata._continue
    assert selected(limit=2, _continue=page.metadata._continue) == ["wrk-2"]

    with pytest.raises(ApiException) as exc:
        kube.core.create_node(make_node("wrk-1"))
    assert exc.value.status == 409
    assert status_body(exc.value)["reason"] == "AlreadyExists"
    with pytest.raises(ApiException) as exc:
        kube.core.list_node(label_selector="role in (a")
    assert exc.value.status == 400 and status_body(exc.value)["reason"] == "BadRequest"

    # A Status; the client (major 37) declares it an `object` and hands over the dict.
    assert kube.core.delete_node("wrk-2")["status"] == "Success"
    assert selected() == ["ctl-1", "wrk-1"]


def test_patch_labels_json_patch_and_cordon(kube: Kube) -> None:
    kube.core.create_node(make_node("wrk-1", keep="yes", drop="me"))
    # A dict body goes out as a strategic merge patch: labels merge, null deletes.
    patched = kube.core.patch_node("wrk-1", {"metadata": {"labels": {"added": "1",
                                                                     "drop": None}}})
    assert patched.metadata.labels == {"keep": "yes", "added": "1"}

    kube.call("PATCH", "/api/v1/nodes/wrk-1", content_type="application/json-patch+json",
              body=[{"op": "add", "path": "/metadata/labels/node-role.kubernetes.io~1edge",
                     "value": "true"},
                    {"op": "replace", "path": "/metadata/labels/added", "value": "2"},
                    {"op": "remove", "path": "/metadata/labels/keep"}])
    labels = kube.core.read_node("wrk-1").metadata.labels
    assert labels == {"added": "2", "node-role.kubernetes.io/edge": "true"}

    node = kube.call("PATCH", "/api/v1/nodes/wrk-1", response_type="V1Node",
                     content_type="application/merge-patch+json",
                     body={"metadata": {"labels": {"added": None}}})
    assert node.metadata.labels == {"node-role.kubernetes.io/edge": "true"}

    with pytest.raises(ApiException) as exc:  # json-patch on a missing key: 422, as for real
        kube.core.patch_node("wrk-1", [{"op": "remove", "path": "/metadata/labels/nope"}])
    assert exc.value.status == 422 and status_body(exc.value)["reason"] == "Invalid"
    with pytest.raises(ApiException) as exc:
        kube.call("PATCH", "/api/v1/nodes/wrk-1", body="{}", content_type="text/plain")
    assert exc.value.status == 415

    before = kube.core.read_node("wrk-1").metadata.resource_version
    cordoned = kube.core.patch_node("wrk-1", {"spec": {"unschedulable": True}})
    assert cordoned.spec.unschedulable is True
    assert int(cordoned.metadata.resource_version) > int(before)
    assert names(kube.core.list_node(field_selector="spec.unschedulable=true").items) == [
        "wrk-1"]
    kube.core.patch_node("wrk-1", [{"op": "replace", "path": "/spec/unschedulable",
                                    "value": False}])
    assert kube.core.read_node("wrk-1").spec.unschedulable is False
    # The main resource ignores status, as the real node strategy does.
    kube.core.patch_node("wrk-1", {"status": {"conditions": [{"type": "Ready",
                                                              "status": "True"}]}})
    assert kube.core.read_node("wrk-1").status.conditions is None


def test_status_heartbeat_then_stale_reads_unknown(start_kubeapi: Callable[..., Kube]) -> None:
    kube = start_kubeapi("--stale-after", "0.5")
    kube.core.create_node(make_node("wrk-1"))
    beat = {"status": {"conditions": [{"type": "Ready", "status": "True",
                                       "reason": "KubeletReady",
                                       "message": "kubelet is posting ready status"}]}}
    node = kube.core.patch_node_status("wrk-1", beat)
    ready = {c.type: c for c in node.status.conditions}["Ready"]
    assert (ready.status, ready.reason) == ("True", "KubeletReady")
    assert ready.last_heartbeat_time and ready.last_transition_time
    # A second condition merges by type (strategic merge), Ready stays.
    node = kube.core.patch_node_status("wrk-1", {"status": {"conditions": [
        {"type": "MemoryPressure", "status": "False"}]}})
    assert {c.type: c.status for c in node.status.conditions} == {
        "Ready": "True", "MemoryPressure": "False"}

    def ready_condition() -> client.V1NodeCondition:
        conditions = kube.core.read_node("wrk-1").status.conditions
        return next(c for c in conditions if c.type == "Ready")

    poll(lambda: ready_condition().status == "Unknown", timeout=5)
    stale = ready_condition()
    assert stale.reason == "NodeStatusUnknown"
    assert stale.message == "Kubelet stopped posting node status."

    node = kube.core.patch_node_status("wrk-1", beat)
    ready = {c.type: c for c in node.status.conditions}["Ready"]
    assert ready.status == "True" and ready.last_transition_time >= stale.last_transition_time


def test_pods_with_field_and_label_selectors(kube: Kube) -> None:
    kube.core.create_namespaced_pod("default", make_pod("web-1", "wrk-1", labels={"app": "web"}))
    kube.core.create_namespaced_pod("default", make_pod("web-2", "wrk-2", labels={"app": "web"}))
    kube.core.create_namespaced_pod("default", make_pod("job-1", "wrk-1", phase="Succeeded"))
    kube.core.create_namespaced_pod("kube-system", make_pod(
        "canal-x", "wrk-1", ns="kube-system", owner="DaemonSet"))
    kube.core.create_namespaced_pod("kube-system", make_pod(
        "etcd-wrk-1", "wrk-1", ns="kube-system",
        annotations={"kubernetes.io/config.mirror": "abc123"}))

    def pods(**kwargs: str) -> list[str]:
        return names(kube.core.list_pod_for_all_namespaces(**kwargs).items)

    # In namespace/name order, as the real API lists from etcd.
    assert pods() == ["job-1", "web-1", "web-2", "canal-x", "etcd-wrk-1"]
    on_wrk1 = kube.core.list_pod_for_all_namespaces(field_selector="spec.nodeName=wrk-1")
    assert names(on_wrk1.items) == ["job-1", "web-1", "canal-x", "etcd-wrk-1"]
    assert pods(field_selector="spec.nodeName==wrk-1,status.phase!=Succeeded") == [
        "web-1", "canal-x", "etcd-wrk-1"]
    assert pods(field_selector="spec.nodeName=wrk-1,metadata.namespace=kube-system") == [
        "canal-x", "etcd-wrk-1"]
    assert names(kube.core.list_namespaced_pod("default", label_selector="app=web").items) == [
        "web-1", "web-2"]
    assert names(kube.core.list_namespaced_pod(
        "default", field_selector="status.phase=Succeeded").items) == ["job-1"]

    daemon = kube.core.read_namespaced_pod("canal-x", "kube-system")
    assert daemon.metadata.owner_references[0].kind == "DaemonSet"
    assert daemon.status.phase == "Running"  # the default: no kubelet will start it
    mirror = kube.core.read_namespaced_pod("etcd-wrk-1", "kube-system")
    assert mirror.metadata.annotations == {"kubernetes.io/config.mirror": "abc123"}

    with pytest.raises(ApiException) as exc:
        kube.core.list_pod_for_all_namespaces(field_selector="spec.nope=x")
    assert exc.value.status == 400
    assert status_body(exc.value)["message"] == "field label not supported: spec.nope"
    with pytest.raises(ApiException) as exc:  # a pod without containers is Invalid
        kube.call("POST", "/api/v1/namespaces/default/pods",
                  body={"metadata": {"name": "bare"}, "spec": {}})
    assert exc.value.status == 422 and status_body(exc.value)["reason"] == "Invalid"

    deleted = kube.core.delete_namespaced_pod("job-1", "default")
    assert deleted.metadata.name == "job-1"  # the pod registry returns the deleted pod
    assert pods(field_selector="metadata.namespace=default") == ["web-1", "web-2"]


def test_eviction_deletes_the_pod(kube: Kube) -> None:
    kube.core.create_namespaced_pod("default", make_pod("web-1", "wrk-1"))
    typed = kube.core.create_namespaced_pod_eviction("web-1", "default", client.V1Eviction(
        metadata=client.V1ObjectMeta(name="web-1", namespace="default")))
    assert typed.kind == "Status"  # what the real API sends, read into the declared V1Eviction
    kube.core.create_namespaced_pod("default", make_pod("web-1", "wrk-1"))
    assert evict(kube, "web-1") == 201
    with pytest.raises(ApiException) as exc:
        kube.core.read_namespaced_pod("web-1", "default")
    assert exc.value.status == 404
    with pytest.raises(ApiException) as exc:
        evict(kube, "web-1")
    assert exc.value.status == 404
    assert status_body(exc.value)["message"] == 'pods "web-1" not found'


def test_pdb_blocks_eviction_with_429(kube: Kube) -> None:
    for i in (1, 2):
        kube.core.create_namespaced_pod("db", make_pod(f"db-{i}", "wrk-1", ns="db",
                                                       labels={"app": "db"}))
    kube.core.create_namespaced_pod("db", make_pod("db-done", "wrk-1", ns="db", phase="Failed",
                                                   labels={"app": "db"}))
    pdb = client.V1PodDisruptionBudget(
        metadata=client.V1ObjectMeta(name="db-pdb"),
        spec=client.V1PodDisruptionBudgetSpec(
            min_available=2, selector=client.V1LabelSelector(match_labels={"app": "db"})))
    kube.policy.create_namespaced_pod_disruption_budget("db", pdb)

    status = kube.policy.read_namespaced_pod_disruption_budget("db-pdb", "db").status
    assert (status.current_healthy, status.desired_healthy, status.disruptions_allowed,
            status.expected_pods) == (2, 2, 0, 3)
    with pytest.raises(ApiException) as exc:
        evict(kube, "db-1", ns="db")
    assert exc.value.status == 429
    body = status_body(exc.value)
    assert body["reason"] == "TooManyRequests"
    assert body["message"] == ("Cannot evict pod as it would violate the pod's disruption "
                               "budget.")
    assert body["details"]["causes"] == [{"reason": "DisruptionBudget", "message":
                                          "The disruption budget db-pdb needs 2 healthy pods "
                                          "and has 2 currently"}]
    assert names(kube.core.list_namespaced_pod("db").items) == ["db-1", "db-2", "db-done"]
    assert evict(kube, "db-done", ns="db") == 201  # a finished pod ignores the budget

    kube.core.create_namespaced_pod("db", make_pod("db-3", "wrk-2", ns="db",
                                                   labels={"app": "db"}))
    assert evict(kube, "db-1", ns="db") == 201  # 3 healthy, 2 needed: one may go
    with pytest.raises(ApiException) as exc:
        evict(kube, "db-2", ns="db")
    assert exc.value.status == 429

    # maxUnavailable, listed across namespaces; deleting the budget lifts it.
    kube.core.create_namespaced_pod("web", make_pod("web-1", "wrk-1", ns="web",
                                                    labels={"app": "web"}))
    kube.policy.create_namespaced_pod_disruption_budget("web", client.V1PodDisruptionBudget(
        metadata=client.V1ObjectMeta(name="web-pdb"),
        spec=client.V1PodDisruptionBudgetSpec(
            max_unavailable=0, selector=client.V1LabelSelector(match_labels={"app": "web"}))))
    assert names(kube.policy.list_pod_disruption_budget_for_all_namespaces().items) == [
        "db-pdb", "web-pdb"]
    with pytest.raises(ApiException) as exc:
        evict(kube, "web-1", ns="web")
    assert exc.value.status == 429
    kube.policy.delete_namespaced_pod_disruption_budget("web-pdb", "web")
    assert names(kube.policy.list_namespaced_pod_disruption_budget("web").items) == []
    assert evict(kube, "web-1", ns="web") == 201


def test_wrong_or_missing_token_is_401(kube: Kube) -> None:
    for token in ("wrong", ""):
        with connect(kube.port, token) as api_client:
            with pytest.raises(ApiException) as exc:
                client.CoreV1Api(api_client).list_node()
        assert exc.value.status == 401
        assert status_body(exc.value)["reason"] == "Unauthorized"


def test_not_found_and_bad_requests_are_status_bodies(kube: Kube) -> None:
    with pytest.raises(ApiException) as exc:
        kube.core.read_node("nope")
    assert exc.value.status == 404
    body = status_body(exc.value)
    assert (body["reason"], body["message"]) == ("NotFound", 'nodes "nope" not found')
    assert body["details"] == {"name": "nope", "kind": "nodes"}
    with pytest.raises(ApiException) as exc:
        kube.policy.read_namespaced_pod_disruption_budget("nope", "default")
    assert status_body(exc.value)["message"] == (
        'poddisruptionbudgets.policy "nope" not found')
    with pytest.raises(ApiException) as exc:
        kube.call("GET", "/api/v1/widgets")
    assert exc.value.status == 404 and status_body(exc.value)["reason"] == "NotFound"
    with pytest.raises(ApiException) as exc:
        kube.call("PUT", "/api/v1/nodes/nope", body={})
    assert exc.value.status == 405


def test_keep_alive_survives_errors_and_unread_looking_bodies(kube: Kube) -> None:
    # Raw HTTP/1.1 on one connection: every error path must consume the request body, or
    # the next request on the connection would be read from the middle of it.
    conn = http.client.HTTPConnection("127.0.0.1", kube.port, timeout=5)
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    requests = [("POST", "/api/v1/nodes", b"{not json", auth, 400),
                ("POST", "/api/v1/nodes", b'{"metadata": {"name": "n1"}}',
                 {**auth, "Authorization": "Bearer wrong"}, 401),
                ("POST", "/api/v1/widgets", b'{"x": 1}', auth, 404),
                ("POST", "/api/v1/nodes", b'{"metadata": {"name": "n1"}}', auth, 201),
                ("GET", "/api/v1/nodes/n1", None, auth, 200)]
    for method, path, body, headers, code in requests:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        payload = json.loads(response.read())
        assert (response.status, response.version) == (code, 11), payload
        assert response.getheader("Content-Type") == "application/json"
        assert not response.will_close
    conn.close()

    # The official client on one pooled connection: errors, then many requests.
    for _ in range(3):
        with pytest.raises(ApiException):
            kube.core.read_node("nope")
    for i in range(100):
        kube.core.patch_node("n1", {"metadata": {"labels": {"i": str(i)}}})
        assert kube.core.read_node("n1").metadata.labels == {"i": str(i)}
    manager = kube.api_client.rest_client.pool_manager
    assert len(manager.pools) == 1
    assert manager.connection_from_url(f"http://127.0.0.1:{kube.port}").num_connections == 1


def test_concurrent_patches_all_land(kube: Kube) -> None:
    kube.core.create_node(make_node("n1"))

    def label(i: int) -> None:
        kube.core.patch_node("n1", {"metadata": {"labels": {f"k{i}": "v"}}})

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(label, range(64)))
    assert len(kube.core.read_node("n1").metadata.labels) == 64


def test_discovery_and_version(kube: Kube) -> None:
    assert client.VersionApi(kube.api_client).get_code().git_version == "v1.30.4+rke2r1"
    assert client.CoreApi(kube.api_client).get_api_versions().versions == ["v1"]
    core = {r.name for r in kube.core.get_api_resources().resources}
    assert {"nodes", "nodes/status", "pods", "pods/eviction"} <= core
    groups = client.ApisApi(kube.api_client).get_api_versions().groups
    assert [g.preferred_version.group_version for g in groups] == [
        "policy/v1", "helm.cattle.io/v1", "coordination.k8s.io/v1"]
    assert [r.name for r in kube.policy.get_api_resources().resources] == [
        "poddisruptionbudgets"]
    leases = client.CoordinationV1Api(kube.api_client).get_api_resources().resources
    assert [r.name for r in leases] == ["leases"]


def test_state_file_survives_a_restart(start_kubeapi: Callable[..., Kube],
                                       tmp_path: Path) -> None:
    state = tmp_path / "kubeapi.json"
    first = start_kubeapi("--state-file", str(state))
    node = first.core.create_node(make_node("wrk-1", role="worker"))
    first.core.patch_node("wrk-1", {"spec": {"unschedulable": True}})
    first.core.create_namespaced_pod("default", make_pod("web-1", "wrk-1"))
    last_rv = first.core.list_node().metadata.resource_version
    first.proc.kill()
    first.proc.wait()

    second = start_kubeapi("--state-file", str(state))
    again = second.core.read_node("wrk-1")
    assert (again.metadata.uid, again.spec.unschedulable) == (node.metadata.uid, True)
    assert names(second.core.list_pod_for_all_namespaces().items) == ["web-1"]
    created = second.core.create_node(make_node("wrk-2"))
    assert int(created.metadata.resource_version) > int(last_rv)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("kubeapi.json")] == [
        "kubeapi.json"]


def established_to(port: int) -> int:
    """Open TCP connections to 127.0.0.1:port, as the connecting side sees them."""
    out = subprocess.run(["ss", "-Htn", "state", "established", "dst", f"127.0.0.1:{port}"],
                         capture_output=True, text=True, check=True).stdout
    return len(out.splitlines())


def test_a_front_end_keeps_its_datastore_connection_across_requests_and_restarts(
        start_kubeapi: Callable[..., Kube], tmp_path: Path) -> None:
    """A controller's API server holds its datastore connection open, as kube-apiserver
    holds etcd's; when the datastore restarts, the next request is served all the same."""
    state = tmp_path / "kubeapi.json"
    store = start_kubeapi("--state-file", str(state))
    front = start_kubeapi("--upstream", f"http://127.0.0.1:{store.port}")
    front.core.create_node(make_node("wrk-1"))
    for i in range(20):
        front.core.patch_node("wrk-1", {"metadata": {"labels": {"i": str(i)}}})
    assert established_to(store.port) == 1  # one kept connection, not one per request

    store.proc.kill()
    store.proc.wait()
    start_kubeapi("--state-file", str(state), port=store.port)
    # The kept connection is dead: the front end finds out on this request and retries it
    # on a new connection, instead of answering 503.
    assert front.core.read_node("wrk-1").metadata.labels == {"i": "19"}
    assert established_to(store.port) == 1
