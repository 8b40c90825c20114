"""Watches on the lab's Kubernetes API stand-in (tests/lab/kubeapi_watch.py), run as real
servers (a datastore, and a front end relaying to it) and read with the official client's
kubernetes.watch.Watch and with raw HTTP, to check the wire format clients depend on."""

from __future__ import annotations

import http.client
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tests.kubeapi_server import TOKEN, Kube, connect, poll

LAB = Path(__file__).resolve().parents[1] / "lab"


def pod(name: str, node: str, **labels: str) -> client.V1Pod:
    return client.V1Pod(metadata=client.V1ObjectMeta(name=name, labels=labels or None),
                        spec=client.V1PodSpec(node_name=node, containers=[
                            client.V1Container(name="main", image="busybox")]))


class Collector:
    """A watch read in a background thread, its events kept as (type, object) pairs."""

    def __init__(self, stream: Iterator[dict[str, Any]]):
        self.events: list[tuple[str, Any]] = []
        self.error: Exception | None = None
        self.ended = threading.Event()
        threading.Thread(target=self._run, args=(stream,), daemon=True).start()

    def _run(self, stream: Iterator[dict[str, Any]]) -> None:
        try:
            for event in stream:
                self.events.append((event["type"], event["object"]))
        except Exception as exc:
            self.error = exc
        finally:
            self.ended.set()

    def seen(self) -> list[tuple[str, str]]:
        return [(t, o.metadata.name) for t, o in self.events]


def raw_watch(port: int, path: str) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path, headers={"Authorization": f"Bearer {TOKEN}"})
    return conn.getresponse()


@pytest.fixture
def pair(start_kubeapi: Callable[..., Kube]) -> tuple[Kube, Kube]:
    """A datastore and a front end in front of it (plain HTTP: the relaying is the same)."""
    store = start_kubeapi("--stale-after", "0")
    front = start_kubeapi("--upstream", f"http://127.0.0.1:{store.port}")
    return store, front


def test_wire_format_and_keep_alive(pair: tuple[Kube, Kube]) -> None:
    _, front = pair
    front.core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name="n1")))
    for kube in pair:
        conn = http.client.HTTPConnection("127.0.0.1", kube.port, timeout=10)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        conn.request("GET", "/api/v1/nodes?watch=true&timeoutSeconds=1", headers=headers)
        response = conn.getresponse()
        assert response.status == 200
        assert response.getheader("Content-Type") == "application/json"
        assert response.getheader("Transfer-Encoding") == "chunked"
        lines = response.read().decode().splitlines()  # ends at the terminating chunk
        event = json.loads(lines[0])
        assert event["type"] == "ADDED" and event["object"]["kind"] == "Node"
        assert event["object"]["apiVersion"] == "v1"
        # The same connection serves the next request: the watch kept the framing.
        conn.request("GET", "/api/v1/nodes", headers=headers)
        assert json.loads(conn.getresponse().read())["kind"] == "NodeList"
        conn.close()


def test_history_selectors_and_deleted_state(pair: tuple[Kube, Kube]) -> None:
    _, front = pair
    core = front.core
    core.create_namespaced_pod("default", pod("web-1", "n1", app="web"))
    rv = core.list_pod_for_all_namespaces().metadata.resource_version
    core.create_namespaced_pod("default", pod("web-2", "n2", app="web"))
    core.patch_namespaced_pod("web-1", "default", {"metadata": {"labels": {"app": "db"}}})
    core.patch_namespaced_pod("web-1", "default", {"metadata": {"labels": {"app": "web"}}})
    core.delete_namespaced_pod("web-1", "default")
    # From the resourceVersion of the list: every change after it, filtered as it goes.
    by_label = list(watch.Watch().stream(core.list_pod_for_all_namespaces,
                                         label_selector="app=web", resource_version=rv,
                                         timeout_seconds=1))
    assert [(e["type"], e["object"].metadata.name) for e in by_label] == [
        ("ADDED", "web-2"), ("DELETED", "web-1"), ("ADDED", "web-1"), ("DELETED", "web-1")]
    stopped = by_label[1]["object"]  # the last state that matched, at the change's version
    assert stopped.metadata.labels == {"app": "web"}
    assert int(stopped.metadata.resource_version) > int(by_label[0]["object"].metadata
                                                        .resource_version)
    deleted = by_label[3]["object"]
    assert deleted.metadata.labels == {"app": "web"} and deleted.spec.node_name == "n1"
    by_node = list(watch.Watch().stream(core.list_namespaced_pod, "default",
                                        field_selector="spec.nodeName=n1",
                                        resource_version=rv, timeout_seconds=1))
    assert [e["type"] for e in by_node] == ["MODIFIED", "MODIFIED", "DELETED"]
    # Unset: the current state as ADDED events first.
    now = list(watch.Watch().stream(core.list_pod_for_all_namespaces, timeout_seconds=1))
    assert [(e["type"], e["object"].metadata.name) for e in now] == [("ADDED", "web-2")]


def test_too_old_resource_version_is_410_expired(pair: tuple[Kube, Kube]) -> None:
    _, front = pair
    core = front.core
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name="n1")))
    first = core.list_node().metadata.resource_version
    for i in range(1001):  # the history keeps the last 1000 events
        core.patch_node("n1", {"metadata": {"labels": {"i": str(i)}}})
    with pytest.raises(ApiException) as caught:
        list(watch.Watch().stream(core.list_node, resource_version=first, timeout_seconds=5))
    assert caught.value.status == 410
    assert "Expired: too old resource version: " + first in caught.value.reason
    # On the wire: a 200 stream with one ERROR event, then the end.
    response = raw_watch(front.port, f"/api/v1/nodes?watch=1&resourceVersion={first}")
    assert response.status == 200
    [line] = response.read().decode().splitlines()
    status = json.loads(line)
    assert status["type"] == "ERROR" and status["object"]["code"] == 410
    assert status["object"]["reason"] == "Expired"


def test_timeout_and_bookmarks(pair: tuple[Kube, Kube]) -> None:
    _, front = pair
    front.core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name="n1")))
    rv = front.core.list_node().metadata.resource_version
    began = time.monotonic()
    response = raw_watch(front.port, f"/api/v1/nodes?watch=1&resourceVersion={rv}"
                         "&timeoutSeconds=3&allowWatchBookmarks=true")
    lines = response.read().decode().splitlines()
    took = time.monotonic() - began
    assert 2.8 <= took < 4.5
    # The watch cache's bookmark 2 s before the timeout, at the version the watch is at.
    assert [json.loads(line) for line in lines] == [{"type": "BOOKMARK", "object": {
        "kind": "Node", "apiVersion": "v1", "metadata": {"resourceVersion": rv}}}]
    began = time.monotonic()
    assert list(watch.Watch().stream(front.core.list_node, resource_version=rv,
                                     timeout_seconds=1)) == []
    assert 0.8 <= time.monotonic() - began < 2.5


def test_events_arrive_as_they_happen_through_a_front_end(pair: tuple[Kube, Kube]) -> None:
    _, front = pair
    core = front.core
    rv = core.list_node().metadata.resource_version
    seen = Collector(watch.Watch().stream(core.list_node, field_selector="metadata.name=n1",
                                          resource_version=rv, timeout_seconds=30))
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name="n2")))
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name="n1")))
    poll(lambda: seen.seen() == [("ADDED", "n1")])
    core.patch_node_status("n1", {"status": {"conditions": [{"type": "Ready",
                                                             "status": "True"}]}})
    poll(lambda: len(seen.events) == 2)
    kind, node = seen.events[1]
    assert kind == "MODIFIED" and node.status.conditions[0].status == "True"
    core.delete_node("n1")
    poll(lambda: [t for t, _ in seen.events] == ["ADDED", "MODIFIED", "DELETED"])
    assert not seen.ended.is_set()


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def test_a_client_leaving_mid_watch_ends_it(pair: tuple[Kube, Kube], tmp_path: Path) -> None:
    store, front = pair
    before = (threads(store.proc.pid), threads(front.proc.pid))
    for _ in range(3):
        response = raw_watch(front.port, "/api/v1/pods?watch=1")
        poll(lambda: threads(store.proc.pid) > before[0])
        response.close()  # hang up with the watch open and quiet
    # Each end notices within a second, and its thread ends without a word. At most as
    # many as before, not exactly: the thread of the fixture's own "is it up?" connection
    # may still have been ending when `before` was counted (seen once in CI).
    poll(lambda: threads(store.proc.pid) <= before[0] and threads(front.proc.pid) <= before[1],
         timeout=5)
    front.core.list_node()  # both still serve
    for kube in pair:  # the fixture's log of each server's stderr
        assert "Traceback" not in (tmp_path / f"kubeapi-{kube.port}.log").read_text()


def test_server_stops_promptly_with_watches_open(start_kubeapi: Callable[..., Kube]) -> None:
    kube = start_kubeapi()
    response = raw_watch(kube.port, "/api/v1/nodes?watch=1")
    assert response.status == 200
    began = time.monotonic()
    kube.proc.send_signal(signal.SIGINT)  # serve_forever's KeyboardInterrupt: main returns
    kube.proc.wait(timeout=5)
    assert time.monotonic() - began < 3


def test_shutdown_in_process_ends_open_watches() -> None:
    """k3s runs its API server inside the engine and calls shutdown() when it stops."""
    sys.path.insert(0, str(LAB))
    try:
        import kubeapi
    finally:
        sys.path.remove(str(LAB))
    server = kubeapi.make_server(kubeapi.parse_args(["--listen", "127.0.0.1:0", "--token",
                                                     TOKEN]))
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    port = server.server_address[1]
    core = client.CoreV1Api(connect(port))
    seen = Collector(watch.Watch().stream(core.list_node, timeout_seconds=60))
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name="n1")))
    poll(lambda: seen.seen() == [("ADDED", "n1")])
    server.shutdown()
    server.server_close()
    poll(seen.ended.is_set, timeout=3)
    serving.join(timeout=3)
    assert not serving.is_alive() and seen.error is None
