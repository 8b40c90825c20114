"""The lab's hostile API (tests/lab/kubeapi_hostile.py): a controller's API server, asked
over TLS with the lab's admin certificate as cargoship asks it, answers with a wrong shape,
slowly, endlessly or hugely when the lab says so, for as many requests as it says."""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.lab import HostSpec, Lab
from tests.waiting import poller

LAB = [sys.executable, "-m", "tests.lab"]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """Two controllers (ctl-1 holds the datastore), shared: each test clears its faults."""
    if os.geteuid() != 0:
        pytest.skip("the lab needs root (namespaces)")
    lab = Lab.up(tmp_path_factory.mktemp("hostile"), [HostSpec("ctl-1", "controller"),
                                                       HostSpec("ctl-2", "controller")])
    for name in ("web-1", "web-2"):
        lab.api("POST", "/api/v1/namespaces/default/pods", {
            "metadata": {"name": name},
            "spec": {"nodeName": "ctl-2", "containers": [{"name": "c", "image": "busybox"}]}})
    yield lab
    lab.down()


@pytest.fixture(autouse=True)
def no_faults(lab: Lab) -> Iterator[None]:
    lab.clear_api_faults()
    yield
    lab.clear_api_faults()


def tls(lab: Lab) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(lab.pki_dir / "server-ca.crt"))
    context.load_cert_chain(lab.pki_dir / "client-admin.crt", lab.pki_dir / "client-admin.key")
    return context


def connect(lab: Lab, host: str, timeout: float = 5) -> http.client.HTTPSConnection:
    return http.client.HTTPSConnection(lab.host(host).address, 6443, context=tls(lab),
                                       timeout=timeout)


def call(lab: Lab, method: str, path: str, body: Any = None, host: str = "ctl-2",
         content_type: str = "application/json", raw: bool = False) -> tuple[int, Any]:
    """A request to a controller's API server (the front end cargoship talks to); the
    answer parsed (raw: its bytes)."""
    conn = connect(lab, host)
    try:
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers={"Content-Type": content_type})
        response = conn.getresponse()
        data = response.read()
        if raw:
            return response.status, data
        if response.getheader("Content-Type", "").startswith("text/plain"):
            return response.status, data.decode()
        return response.status, json.loads(data)
    finally:
        conn.close()


class Raw:
    """A request on a plain TLS socket, so the answer can be read against a clock (after a
    timeout, http.client's reader cannot be read again)."""

    def __init__(self, lab: Lab, path: str, host: str = "ctl-2"):
        address = lab.host(host).address
        sock = socket.create_connection((address, 6443), timeout=5)
        self.sock = tls(lab).wrap_socket(sock, server_hostname=address)
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {address}\r\n\r\n".encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.sock.recv(65536)
            assert chunk, f"the connection closed before the headers: {data!r}"
            data += chunk
        head, _, self.body = data.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {k.lower(): v.strip() for k, _, v in
                        (line.partition(":") for line in lines[1:])}

    def read_for(self, seconds: float) -> tuple[int, bool]:
        """Bytes received (body, framing included) within `seconds`, and whether the server
        closed the connection meanwhile. The first read's count includes what came with the
        headers; `first` holds the start of the body."""
        deadline = time.monotonic() + seconds
        count, self.first, self.body = len(self.body), self.body, b""
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(1 << 20)
            except TimeoutError:
                break
            if not chunk:
                return count, True
            count += len(chunk)
            if len(self.first) < 200:
                self.first += chunk
        return count, False

    def close(self) -> None:
        self.sock.close()


poll = poller(timeout=10)


def ready(node: dict[str, Any]) -> dict[str, str]:
    return next(c for c in node["status"]["conditions"] if c["type"] == "Ready")


def test_shape_changes_the_field_and_the_rest_follows_the_node(lab: Lab) -> None:
    lab.api_fault("read-node", "shape", node="ctl-1", set={"status": "garbage"})
    assert call(lab, "GET", "/api/v1/nodes/ctl-1")[1]["status"] == "garbage"
    assert isinstance(call(lab, "GET", "/api/v1/nodes/ctl-2")[1]["status"], dict)  # other node
    assert isinstance(lab.api("GET", "/api/v1/nodes/ctl-1")["status"], dict)  # datastore: true

    lab.clear_api_faults()
    stale = "2000-01-01T00:00:00Z"
    lab.api_fault("read-node", "shape", node="ctl-1",
                  set={"status.conditions[type=Ready].lastHeartbeatTime": stale})
    first = call(lab, "GET", "/api/v1/nodes/ctl-1")[1]
    real = lab.api("GET", "/api/v1/nodes/ctl-1")
    assert ready(first)["lastHeartbeatTime"] == stale
    assert ready(first)["status"] == ready(real)["status"] == "True"
    assert ready(first)["lastTransitionTime"] == ready(real)["lastTransitionTime"]
    # The node moves on (a label: the kubelet posts its status only when it changes), its
    # Ready heartbeat stays put.
    lab.api("PATCH", "/api/v1/nodes/ctl-1", {"metadata": {"labels": {"moved": "on"}}},
            "application/merge-patch+json")
    poll(lambda: call(lab, "GET", "/api/v1/nodes/ctl-1")[1]["metadata"]["resourceVersion"]
         != first["metadata"]["resourceVersion"])
    assert ready(call(lab, "GET", "/api/v1/nodes/ctl-1")[1])["lastHeartbeatTime"] == stale
    lab.api("PATCH", "/api/v1/nodes/ctl-1", {"metadata": {"labels": {"moved": None}}},
            "application/merge-patch+json")

    # retime: the real heartbeat, fresh as ever, in another (valid RFC 3339) spelling.
    lab.clear_api_faults()
    lab.api_fault("read-node", "shape", node="ctl-1", retime={
        "status.conditions[type=Ready].lastHeartbeatTime": "%Y-%m-%dT%H:%M:%S+00:00"})
    seen = ready(call(lab, "GET", "/api/v1/nodes/ctl-1")[1])["lastHeartbeatTime"]
    real = ready(lab.api("GET", "/api/v1/nodes/ctl-1"))
    assert seen.endswith("+00:00") and seen[:19] <= real["lastHeartbeatTime"][:19]
    # A status post a second later (as the kubelet's at its next change): the API stamps
    # its heartbeat, and the retimed one follows it.
    poll(lambda: time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) > seen[:19])
    lab.api("PATCH", "/api/v1/nodes/ctl-1/status", {"status": {"conditions": [real]}},
            "application/merge-patch+json")
    assert ready(call(lab, "GET", "/api/v1/nodes/ctl-1")[1])["lastHeartbeatTime"] > seen


def test_shape_applies_to_each_list_item_and_each_watch_event(lab: Lab) -> None:
    lab.api_fault("list-pods", "shape", node="ctl-2", set={"spec.nodeName": 7})
    code, listing = call(lab, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dctl-2")
    assert code == 200 and listing["kind"] == "PodList"
    # Every item, the rke2 API server's mirror pod on ctl-2 included.
    assert {p["spec"]["nodeName"] for p in listing["items"]} == {7}
    assert len(_ours(listing["items"])) == 2

    lab.api_fault("watch-nodes", "shape", node="ctl-1", times=1,
                  set={"metadata.name": None, "$.type": "SIDEWAYS"})
    conn = connect(lab, "ctl-2")
    try:
        conn.request("GET", "/api/v1/nodes?watch=1&fieldSelector=metadata.name%3Dctl-1")
        response = conn.getresponse()
        event = json.loads(response.readline())
    finally:
        conn.close()
    assert event["type"] == "SIDEWAYS" and event["object"]["metadata"]["name"] is None
    assert event["object"]["kind"] == "Node" and "status" in event["object"]


def test_times_is_honoured_and_clear_restores_the_truth(lab: Lab) -> None:
    lab.api_fault("read-node", "shape", node="ctl-1", times=2, set={"spec": "x"})
    specs = [call(lab, "GET", "/api/v1/nodes/ctl-1")[1]["spec"] for _ in range(3)]
    assert specs[:2] == ["x", "x"] and isinstance(specs[2], dict)
    assert lab.api("GET", "/lab/v1/faults")["items"] == []

    lab.api_fault("read-node", "shape", set={"spec": "y"})  # any node, until cleared
    for node in ("ctl-1", "ctl-2", "ctl-1", "ctl-2"):
        assert call(lab, "GET", f"/api/v1/nodes/{node}")[1]["spec"] == "y"
    lab.clear_api_faults()
    assert isinstance(call(lab, "GET", "/api/v1/nodes/ctl-1")[1]["spec"], dict)


def test_slow_declares_its_length_then_drips_without_blocking_others(lab: Lab) -> None:
    lab.api_fault("list-pods", "slow", node="ctl-2", times=1, for_seconds=5)
    slow = Raw(lab, "/api/v1/pods?fieldSelector=spec.nodeName%3Dctl-2")
    try:
        assert slow.status == 200 and slow.headers["content-length"] == "100000000"
        assert slow.headers["content-type"] == "application/json"
        began = time.monotonic()
        count, closed = slow.read_for(3)
        assert 1 <= count < 10 and not closed and slow.first.startswith(b"{")
        assert not slow.first[1:].strip()
        # Meanwhile the API server answers everyone else, the same request included.
        code, listing = call(lab, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dctl-2")
        assert code == 200 and len(_ours(listing["items"])) == 2
        _, closed = slow.read_for(4)
        assert closed and time.monotonic() - began < 6.5  # for_seconds ends it
    finally:
        slow.close()


def test_endless_keeps_sending_until_its_time_is_up(lab: Lab) -> None:
    lab.api_fault("watch-pods", "endless", times=1, for_seconds=3)
    endless = Raw(lab, "/api/v1/pods?watch=1&fieldSelector=spec.nodeName%3Dctl-2")
    try:
        assert endless.status == 200 and endless.headers["transfer-encoding"] == "chunked"
        early, closed = endless.read_for(2)
        assert not closed and early > 500_000  # ~1 MB/s
        assert b'{"type": "ADDED", "object": ' in endless.first
        late, closed = endless.read_for(4)
        assert late > 200_000 and closed  # still sending past 2 s, then cut
    finally:
        endless.close()


def test_huge_pod_list_streams_valid_pods_of_the_size_asked(lab: Lab) -> None:
    size = 50_000_000
    lab.api_fault("list-pods", "huge", node="ctl-2", times=1, bytes=size)
    conn = connect(lab, "ctl-2", timeout=10)
    try:
        conn.request("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dctl-2")
        response = conn.getresponse()
        assert response.status == 200 and response.getheader("Content-Length") == str(size)
        count, items = stream_items(response)
    finally:
        conn.close()
    assert count == size
    assert items[:2] == ["web-1", "web-2"] and len(items) > 30_000
    assert len(set(items)) == len(items)


def stream_items(response: http.client.HTTPResponse) -> tuple[int, list[str]]:
    """Bytes of a PodList answer and its pods' names, parsed item by item (never whole);
    every item must be a pod bound to ctl-2."""
    decoder, buf, count, names = json.JSONDecoder(), "", 0, []
    opening = '"items": ['
    head_done = False
    while data := response.read(1 << 20):
        count += len(data)
        buf += data.decode()
        if not head_done:
            start = buf.find(opening)
            if start < 0:
                continue
            assert json.loads(buf[:start + len(opening)] + "]}")["kind"] == "PodList"
            buf, head_done = buf[start + len(opening):], True
        pos = 0
        while True:
            while buf[pos:pos + 1] in (" ", ","):
                pos += 1
            try:
                item, pos = decoder.raw_decode(buf, pos)
            except ValueError:
                break
            assert item["spec"]["nodeName"] == "ctl-2"
            names.append(item["metadata"]["name"])
        buf = buf[pos:]
    assert buf.strip() == "]}"
    return count, names


def test_huge_node_watch_and_patch_are_complete_json(lab: Lab) -> None:
    lab.api_fault("read-node", "huge", node="ctl-1", times=1, bytes=10_000_000)
    code, data = call(lab, "GET", "/api/v1/nodes/ctl-1", raw=True)
    assert code == 200 and len(data) == 10_000_000
    assert json.loads(data)["metadata"]["name"] == "ctl-1"

    lab.api_fault("watch-nodes", "huge", node="ctl-1", times=1, bytes=5_000_000)
    conn = connect(lab, "ctl-2")
    try:
        conn.request("GET", "/api/v1/nodes?watch=1&fieldSelector=metadata.name%3Dctl-1")
        response = conn.getresponse()
        line = response.readline(6_000_000)
        assert response.read() == b""  # one event, then the end
    finally:
        conn.close()
    assert len(line) == 5_000_000 and line.endswith(b"\n")
    assert json.loads(line)["object"]["metadata"]["name"] == "ctl-1"

    # The patch really happens; only its answer is hostile.
    lab.api_fault("patch-node", "huge", node="ctl-2", times=1, bytes=2_000_000)
    code, data = call(lab, "PATCH", "/api/v1/nodes/ctl-2", {"metadata": {"labels": {
        "hostile": "yes"}}}, content_type="application/merge-patch+json", raw=True)
    assert code == 200 and len(data) == 2_000_000
    assert json.loads(data)["metadata"]["labels"]["hostile"] == "yes"
    assert lab.api("GET", "/api/v1/nodes/ctl-2")["metadata"]["labels"]["hostile"] == "yes"


def test_evict_and_readyz_faults(lab: Lab) -> None:
    lab.api_fault("evict", "shape", node="ctl-2", times=1, write=False,
                  set={"$.status": "Maybe"})
    code, answer = call(lab, "POST", "/api/v1/namespaces/default/pods/web-2/eviction",
                        {"metadata": {"name": "web-2", "namespace": "default"}})
    assert code == 201 and answer["status"] == "Maybe"
    assert lab.api("GET", "/api/v1/namespaces/default/pods/web-2")["metadata"]["name"]

    lab.api_fault("readyz", "shape", node="ctl-2", set={"code": 500, "body": "[-]etcd no\n"})
    assert call(lab, "GET", "/readyz", host="ctl-2") == (500, "[-]etcd no\n")
    assert call(lab, "GET", "/readyz", host="ctl-1") == (200, "ok\n")


def test_cli_sets_and_clears_faults(lab: Lab) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*LAB, "api-fault", "--dir", str(lab.dir), *args],
                              capture_output=True, text=True, cwd=ROOT, timeout=30)

    done = cli("read-node", "shape", "--node", "ctl-1", "--times", "1",
               "--set", "set.status=garbage", "--set", "set.spec.taints=[1]")
    assert done.returncode == 0, done.stderr
    node = call(lab, "GET", "/api/v1/nodes/ctl-1")[1]
    assert node["status"] == "garbage" and node["spec"]["taints"] == [1]
    assert isinstance(call(lab, "GET", "/api/v1/nodes/ctl-1")[1]["status"], dict)

    assert cli("list-nodes", "slow", "--set", "interval=0.5").returncode == 0
    assert [f["params"] for f in lab.api("GET", "/lab/v1/faults")["items"]] == [
        {"interval": 0.5}]
    assert cli("--clear").returncode == 0
    assert lab.api("GET", "/lab/v1/faults")["items"] == []
    refused = cli("list-nodes", "slow", "--set", "interval=-1")
    assert refused.returncode == 1 and "interval" in refused.stderr
    assert cli("sideways", "slow").returncode == 2


def test_k3s_api_server_inside_its_engine_serves_faults_too(lab_factory: Callable[..., Lab]
                                                            ) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller")], distro="k3s")
    lab.api_fault("read-node", "shape", node="ctl-1", times=1, set={"spec": "k3s"})
    assert call(lab, "GET", "/api/v1/nodes/ctl-1", host="ctl-1")[1]["spec"] == "k3s"

    lab.api_fault("readyz", "huge", node="ctl-1", times=1, bytes=1_000_000)
    code, text = call(lab, "GET", "/readyz", host="ctl-1")
    assert code == 200 and len(text) == 1_000_000 and text.endswith("ok\n")

    lab.api_fault("readyz", "endless", node="ctl-1", times=1, for_seconds=2)
    endless = Raw(lab, "/readyz", host="ctl-1")
    try:
        assert endless.headers["content-type"].startswith("text/plain")
        count, closed = endless.read_for(1.5)
        assert count > 500_000 and not closed
        assert endless.read_for(3)[1]
    finally:
        endless.close()
    assert call(lab, "GET", "/readyz", host="ctl-1") == (200, "ok\n")


def _ours(pods: list[dict]) -> list[dict]:  # type: ignore[type-arg]
    """The pods this file made, not the engine's own mirror pod (kube-apiserver-<node>)."""
    return [p for p in pods if not p["metadata"]["name"].startswith("kube-apiserver-")]
