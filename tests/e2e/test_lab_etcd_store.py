"""Each lab controller's API server keeps its objects in its own etcd member only, as
kube-apiserver does with --etcd-servers=https://127.0.0.1:2379 (issue 27): what one writes,
another reads, though they share nothing but etcd; the objects are in etcd under
kube-apiserver's keys; a controller whose member is paused refuses reads and writes and
fails /readyz while the other two serve; with two members of three stopped, none serves.
The node lifecycle controller runs in one place at a time, the holder of a Lease."""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from tests.lab import HostSpec, Lab, Timing

TIMING = Timing(engine_start=0, kubelet_heartbeat=0.5, node_grace=3)
CONTROLLERS = [HostSpec(f"ctl-{i}", "controller") for i in (1, 2, 3)]
POD = "/api/v1/namespaces/default/pods/probe"


def poll(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached before the deadline"
        time.sleep(0.1)


def call(lab: Lab, host: str, method: str, path: str, body: Any = None,
         content_type: str = "application/json") -> tuple[int, Any]:
    """A request to `host`'s API server with the admin's certificate: (status, JSON or
    text); status 0 when it does not answer."""
    context = ssl.create_default_context(cafile=str(lab.pki_dir / "server-ca.crt"))
    context.load_cert_chain(lab.pki_dir / "client-admin.crt", lab.pki_dir / "client-admin.key")
    request = urllib.request.Request(
        lab.apiserver_url(host) + path, method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            status, data = int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        status, data = int(exc.code), exc.read()
    except OSError:
        return 0, None
    try:
        return status, json.loads(data)
    except ValueError:
        return status, data.decode()


def label(lab: Lab, host: str, value: str) -> int:
    """A write through `host`'s API server: its status code."""
    return call(lab, host, "PATCH", POD, {"metadata": {"labels": {"probe": value}}},
                "application/merge-patch+json")[0]


def read_label(lab: Lab, host: str) -> tuple[int, str | None]:
    status, pod = call(lab, host, "GET", POD)
    return status, (pod["metadata"].get("labels") or {}).get("probe") if status == 200 \
        else None


def stored(lab: Lab, host: str, key: str, serializable: bool = False) -> dict[str, Any]:
    """The key in `host`'s etcd member, straight from its JSON gateway: {"value", "mod"}."""
    answer = lab.etcd_call(host, "/v3/kv/range", {
        "key": base64.b64encode(key.encode()).decode(), "serializable": serializable})
    [kv] = answer["kvs"]
    return {"value": json.loads(base64.b64decode(kv["value"])), "mod": int(kv["mod_revision"])}


def test_controllers_share_only_etcd_and_one_without_quorum_serves_nothing(
        lab_factory: Callable[..., Lab]) -> None:
    lab = lab_factory(CONTROLLERS, timing=TIMING)
    status, pod = call(lab, "ctl-1", "POST", "/api/v1/namespaces/default/pods", {
        "metadata": {"name": "probe", "labels": {"probe": "a"}},
        "spec": {"nodeName": "ctl-1", "containers": [{"name": "c", "image": "busybox"}]}})
    assert status == 201
    # Read through the other two: they share only etcd.
    for host in ("ctl-2", "ctl-3"):
        status, seen = call(lab, host, "GET", POD)
        assert status == 200 and seen["metadata"]["uid"] == pod["metadata"]["uid"]
    # In etcd, where kube-apiserver keeps it; its resourceVersion is the key's revision
    # and is not stored in the value.
    kept = stored(lab, "ctl-3", "/registry/pods/default/probe")
    assert kept["value"]["metadata"]["uid"] == pod["metadata"]["uid"]
    assert "resourceVersion" not in kept["value"]["metadata"]
    assert kept["mod"] == int(pod["metadata"]["resourceVersion"])
    node = stored(lab, "ctl-2", "/registry/minions/ctl-1")["value"]
    assert node["kind"] == "Node" and node["metadata"]["name"] == "ctl-1"

    # ctl-3's member paused (a member that hangs): its API server fails /readyz's etcd
    # check and refuses reads and writes; the other two serve both, and share them.
    lab.etcd_member("ctl-3", "pause")
    try:
        poll(lambda: call(lab, "ctl-3", "GET", "/readyz?verbose")[0] == 500)
        assert "[-]etcd failed" in call(lab, "ctl-3", "GET", "/readyz?verbose")[1]
        assert read_label(lab, "ctl-3")[0] >= 500
        assert label(lab, "ctl-3", "refused") >= 500
        for writer, reader in (("ctl-1", "ctl-2"), ("ctl-2", "ctl-1")):
            assert call(lab, writer, "GET", "/readyz")[0] == 200
            assert label(lab, writer, writer) == 200
            assert read_label(lab, reader) == (200, writer)
    finally:
        lab.etcd_member("ctl-3", "resume")
    # Back: it serves what was written while it was out.
    poll(lambda: read_label(lab, "ctl-3") == (200, "ctl-2"))
    assert label(lab, "ctl-3", "back") == 200 and read_label(lab, "ctl-1") == (200, "back")

    # Two members of three stopped: no quorum anywhere, so no controller serves reads or
    # writes, while the data stays in the members (a serializable read of ctl-1's own).
    lab.etcd_member("ctl-2", "stop")
    lab.etcd_member("ctl-3", "stop")
    try:
        poll(lambda: call(lab, "ctl-1", "GET", "/readyz")[0] == 500)
        for host in ("ctl-1", "ctl-2", "ctl-3"):
            assert read_label(lab, host)[0] >= 500
            assert label(lab, host, "lost") >= 500
        assert stored(lab, "ctl-1", "/registry/pods/default/probe", serializable=True)[
            "value"]["metadata"]["labels"] == {"probe": "back"}
    finally:
        lab.etcd_member("ctl-2", "start")
        lab.etcd_member("ctl-3", "start")
    poll(lambda: all(read_label(lab, h) == (200, "back") for h in ("ctl-1", "ctl-2", "ctl-3")))


def lease_holder(lab: Lab, host: str) -> str | None:
    """The controller whose API server holds the controllers' Lease (None: nobody yet), as
    `host`'s member has it (a serializable read: an etcd election may be under way)."""
    answer = lab.etcd_call(host, "/v3/kv/range", {"key": base64.b64encode(
        b"/registry/leases/kube-system/kube-controller-manager").decode(),
        "serializable": True})
    if not answer.get("kvs"):
        return None
    lease = json.loads(base64.b64decode(answer["kvs"][0]["value"]))
    return str(lease["spec"]["holderIdentity"]).rsplit("_", 1)[0]


def ready(lab: Lab, node: str) -> str | None:
    conditions = lab.api("GET", f"/api/v1/nodes/{node}")["status"].get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == "Ready"), None)


def test_the_node_lifecycle_controller_runs_where_the_lease_is(
        lab_factory: Callable[..., Lab]) -> None:
    lab = lab_factory([*CONTROLLERS, HostSpec("wrk-1", "worker")], timing=TIMING)
    poll(lambda: lease_holder(lab, "ctl-1") is not None)
    leader = lease_holder(lab, "ctl-1")
    assert leader in ("ctl-1", "ctl-2", "ctl-3")
    lab.exec("wrk-1", "sv -w 30 stop /etc/service/rke2-agent")
    poll(lambda: ready(lab, "wrk-1") == "Unknown")
    # The leader's member hangs: its lease runs out and another API server takes it, from
    # the nodes as stored: a node that goes silent now is marked by the new leader.
    lab.etcd_member(leader, "pause")
    try:
        other = next(h for h in ("ctl-1", "ctl-2", "ctl-3") if h != leader)
        poll(lambda: lease_holder(lab, other) not in (None, leader))
        lab.exec("wrk-1", "sv -w 30 start /etc/service/rke2-agent")
        poll(lambda: ready(lab, "wrk-1") == "True")
        lab.exec("wrk-1", "sv -w 30 stop /etc/service/rke2-agent")
        poll(lambda: ready(lab, "wrk-1") == "Unknown")
    finally:
        lab.etcd_member(leader, "resume")
