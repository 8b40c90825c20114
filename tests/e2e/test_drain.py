"""executor.drain against the lab's Kubernetes API stand-in (tests/lab/kubeapi.py), run as a
real server and reached through the official client."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from kubernetes import client

from executor.drain import CORDONED_BY, NodeOps
from executor.drain_pods import DrainOptions
from executor.node_api import DrainError
from tests.kubeapi_server import Kube, poll

NODE = "wrk-1"

Start = Callable[..., client.CoreV1Api]


@pytest.fixture
def start_api(start_kubeapi: Callable[..., Kube]) -> Start:
    """Start a kubeapi server (extra CLI arguments allowed) and return a CoreV1Api on it."""
    return lambda *args: start_kubeapi(*args).core


@pytest.fixture
def core(start_api: Start) -> client.CoreV1Api:
    api = start_api()
    api.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=NODE)))
    return api


def make_pod(name: str, ns: str = "default", owner: str | None = "ReplicaSet",
             labels: dict[str, str] | None = None, emptydir: bool = False,
             annotations: dict[str, str] | None = None, node: str = NODE) -> client.V1Pod:
    owners = [client.V1OwnerReference(api_version="apps/v1", kind=owner, name=f"{name}-owner",
                                      uid=f"uid-{name}-owner", controller=True)] if owner else None
    volumes = [client.V1Volume(name="scratch", empty_dir=client.V1EmptyDirVolumeSource())] \
        if emptydir else None
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, namespace=ns, labels=labels,
                                     owner_references=owners, annotations=annotations),
        spec=client.V1PodSpec(node_name=node, volumes=volumes,
                              containers=[client.V1Container(name="main", image="busybox")]))


def create(core: client.CoreV1Api, *pods: client.V1Pod) -> None:
    for pod in pods:
        core.create_namespaced_pod(pod.metadata.namespace, pod)


def on_node(core: client.CoreV1Api, node: str = NODE) -> list[str]:
    pods = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
    return [f"{p.metadata.namespace}/{p.metadata.name}" for p in pods]


def unschedulable(core: client.CoreV1Api, node: str = NODE) -> bool:
    return bool(core.read_node(node).spec.unschedulable)


def add_pdb(core: client.CoreV1Api, ns: str, name: str, min_available: int,
            app: str) -> client.PolicyV1Api:
    policy = client.PolicyV1Api(core.api_client)
    policy.create_namespaced_pod_disruption_budget(ns, client.V1PodDisruptionBudget(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodDisruptionBudgetSpec(
            min_available=min_available,
            selector=client.V1LabelSelector(match_labels={"app": app}))))
    return policy


# --- cordon / uncordon -----------------------------------------------------------------------

def test_cordon_says_whether_cargoship_cordoned(core: client.CoreV1Api) -> None:
    ops = NodeOps(core)
    assert not unschedulable(core)
    assert ops.cordon(NODE, owner="plan-a") is True
    assert unschedulable(core)
    annotations = core.read_node(NODE).metadata.annotations
    assert annotations[CORDONED_BY] == "plan-a"
    # Still cordoned by cargoship (a run that died before giving the node back): ours.
    assert ops.cordon(NODE, owner="plan-b") is True
    ops.uncordon(NODE)
    assert not unschedulable(core)
    assert CORDONED_BY not in (core.read_node(NODE).metadata.annotations or {})
    # Cordoned by someone else (kubectl cordon): not ours to uncordon.
    core.patch_node(NODE, {"spec": {"unschedulable": True}})
    assert ops.cordon(NODE) is False
    assert unschedulable(core)


def test_cordon_of_a_missing_node_is_a_one_line_error(core: client.CoreV1Api) -> None:
    with pytest.raises(DrainError) as exc:
        NodeOps(core).cordon("nope")
    assert str(exc.value) == 'node nope: reading the node failed: nodes "nope" not found'


# --- drain -----------------------------------------------------------------------------------

def test_drain_evicts_normal_pods_and_skips_daemonset_mirror_and_finished(
        core: client.CoreV1Api) -> None:
    finished = make_pod("job-1")
    finished.status = client.V1PodStatus(phase="Succeeded")
    create(core, make_pod("web-1"), make_pod("web-2", ns="shop"), finished,
           make_pod("canal-x", ns="kube-system", owner="DaemonSet"),
           make_pod("etcd-wrk-1", ns="kube-system", owner=None,
                    annotations={"kubernetes.io/config.mirror": "abc"}),
           make_pod("web-3", node="wrk-2"))
    ops = NodeOps(core)
    ops.cordon(NODE)

    report = ops.drain(NODE, DrainOptions(timeout=10))

    assert report.evicted == ("default/web-1", "shop/web-2")
    assert report.skipped == ("default/job-1 (already Succeeded)",
                              "kube-system/canal-x (DaemonSet-managed)",
                              "kube-system/etcd-wrk-1 (mirror pod)")
    assert on_node(core) == ["default/job-1", "kube-system/canal-x", "kube-system/etcd-wrk-1"]
    assert on_node(core, "wrk-2") == ["default/web-3"]  # other nodes untouched


def test_drain_refuses_an_uncordoned_node(core: client.CoreV1Api) -> None:
    create(core, make_pod("web-1"))
    with pytest.raises(DrainError, match="not cordoned"):
        NodeOps(core).drain(NODE, DrainOptions(timeout=5))
    assert on_node(core) == ["default/web-1"]


def test_emptydir_pod_refused_without_the_option_evicted_with_it(
        core: client.CoreV1Api) -> None:
    create(core, make_pod("cache-1", emptydir=True), make_pod("web-1"))
    ops = NodeOps(core)
    ops.cordon(NODE)

    with pytest.raises(DrainError) as exc:
        ops.drain(NODE, DrainOptions(timeout=5))
    assert str(exc.value) == ("node wrk-1: drain refused, nothing evicted: default/cache-1 "
                              "(has emptyDir data, needs delete_emptydir_data)")
    assert on_node(core) == ["default/cache-1", "default/web-1"]  # nothing evicted

    report = ops.drain(NODE, DrainOptions(timeout=5, delete_emptydir_data=True))
    assert report.evicted == ("default/cache-1", "default/web-1")
    assert on_node(core) == []


def test_unmanaged_pods_refused_together_without_force(core: client.CoreV1Api) -> None:
    create(core, make_pod("bare-1", owner=None), make_pod("bare-2", ns="x", owner=None,
                                                          emptydir=True), make_pod("web-1"))
    ops = NodeOps(core)
    ops.cordon(NODE)

    with pytest.raises(DrainError) as exc:
        ops.drain(NODE, DrainOptions(timeout=5))
    message = str(exc.value)
    assert "\n" not in message
    assert "default/bare-1 (not managed by a controller, needs force)" in message
    assert ("x/bare-2 (has emptyDir data, needs delete_emptydir_data; not managed by a "
            "controller, needs force)") in message
    assert "web-1" not in message
    assert on_node(core) == ["default/bare-1", "default/web-1", "x/bare-2"]

    report = ops.drain(NODE, DrainOptions(timeout=5, force=True, delete_emptydir_data=True))
    assert report.evicted == ("default/bare-1", "default/web-1", "x/bare-2")
    assert on_node(core) == []


def test_pdb_blocks_until_the_drain_timeout(core: client.CoreV1Api) -> None:
    create(core, make_pod("db-1", ns="db", labels={"app": "db"}),
           make_pod("db-2", ns="db", labels={"app": "db"}))
    add_pdb(core, "db", "db-pdb", 2, "db")
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    ops = NodeOps(core, sleep=sleep)
    ops.cordon(NODE)
    started = time.monotonic()
    with pytest.raises(DrainError) as exc:
        ops.drain(NODE, DrainOptions(timeout=1.5, retry_interval=0.2))
    took = time.monotonic() - started

    message = str(exc.value)
    assert message.startswith("node wrk-1: eviction blocked by a disruption budget until "
                              "the 1.5 s drain timeout: db/db-1 (")
    assert "db/db-2 (" in message
    assert "The disruption budget db-pdb needs 2 healthy pods and has 2 currently" in message
    assert took >= 1.5
    assert took < 5
    assert len(waits) >= 5 and max(waits) <= 0.2  # retried at the interval, not once
    assert on_node(core) == ["db/db-1", "db/db-2"]


def test_pdb_block_is_retried_until_the_budget_allows(core: client.CoreV1Api) -> None:
    create(core, make_pod("db-1", ns="db", labels={"app": "db"}), make_pod("web-1"))
    policy = add_pdb(core, "db", "db-pdb", 1, "db")

    def sleep(seconds: float) -> None:
        # The budget is lifted during the first retry wait (as when a replacement pod
        # becomes ready elsewhere).
        policy.delete_namespaced_pod_disruption_budget("db-pdb", "db")
        time.sleep(seconds)

    ops = NodeOps(core, sleep=sleep)
    ops.cordon(NODE)
    notes: list[str] = []
    report = ops.drain(NODE, DrainOptions(timeout=10, retry_interval=0.05), note=notes.append)
    assert report.evicted == ("db/db-1", "default/web-1")
    assert on_node(core) == []
    # The wait for the budget is said once, as it begins (the drain's progress line).
    assert notes == ["draining: waiting for db/db-1 (a disruption budget allows no eviction "
                     "now), up to the 10 s drain timeout"]


def test_evicted_pods_still_shutting_down_at_the_first_look_are_said_once(
        core: client.CoreV1Api) -> None:
    pod = make_pod("slow-1")
    # The lab keeps it terminating 5 s: the first look, 0.3 s in, finds it there even on a
    # loaded machine.
    pod.spec.termination_grace_period_seconds = 5
    create(core, pod, make_pod("quick-1"))
    ops = NodeOps(core)
    ops.cordon(NODE)
    notes: list[str] = []
    report = ops.drain(NODE, DrainOptions(timeout=10, retry_interval=0.3), note=notes.append)
    assert report.evicted == ("default/quick-1", "default/slow-1")
    assert on_node(core) == []
    assert notes == ["draining: waiting for default/slow-1 to shut down (evicted), up to the "
                     "10 s drain timeout"]


def test_pod_gone_before_its_eviction_is_fine(core: client.CoreV1Api) -> None:
    create(core, make_pod("db-1", ns="db", labels={"app": "db"}))
    add_pdb(core, "db", "db-pdb", 1, "db")

    def sleep(seconds: float) -> None:
        core.delete_namespaced_pod("db-1", "db")  # deleted by someone else meanwhile: 404

    ops = NodeOps(core, sleep=sleep)
    ops.cordon(NODE)
    report = ops.drain(NODE, DrainOptions(timeout=10, retry_interval=0.05))
    assert report == type(report)(evicted=(), skipped=("db/db-1 (already gone)",))


# --- readiness -------------------------------------------------------------------------------

READY = {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                    "message": "kubelet is posting ready status"}]}}


def ready(core: client.CoreV1Api, node: str) -> str | None:
    conditions = core.read_node(node).status.conditions or []
    return next((c.status for c in conditions if c.type == "Ready"), None)


def test_the_stand_in_turns_a_silent_node_unknown_and_back(start_api: Start) -> None:
    # The node lifecycle controller's rule (kubernetes pkg/controller/nodelifecycle
    # node_lifecycle_controller.go, tryUpdateNodeHealth): no status within the grace
    # period and Ready becomes Unknown; the kubelet's next status makes it True again.
    core = start_api("--stale-after", "0.5")
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=NODE)))
    assert ready(core, NODE) is None  # created, never reported
    core.patch_node_status(NODE, READY)
    assert ready(core, NODE) == "True"
    poll(lambda: ready(core, NODE) == "Unknown")
    reason = next(c for c in core.read_node(NODE).status.conditions if c.type == "Ready")
    assert (reason.reason, reason.message) == ("NodeStatusUnknown",
                                               "Kubelet stopped posting node status.")
    core.patch_node_status(NODE, READY)  # the kubelet is back
    assert ready(core, NODE) == "True"
