"""The lab's etcd members behave as a real rke2/k3s cluster's do (issue 27): one cluster of
real etcd members over the lab network, TLS with client certificates at the engines'
paths; each API server keeps its objects in its own member (kubeapi_etcdstore.py), so
its readiness, writes and reads of the most recent state need that member's quorum;
k3s's member ends with its engine, rke2's outlives it and is recreated only when its
manifest changed."""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.error
import urllib.request

import pytest

from tests.lab import FAST_NODES, HostSpec, Lab
from tests.lab.etcd import ELECTION_TIMEOUT
from tests.waiting import poller

TIMING = FAST_NODES  # nodes watched changing within seconds
CONTROLLERS = [HostSpec(f"ctl-{i}", "controller") for i in (1, 2, 3)]


poll = poller(timeout=20)


def _admin(lab: Lab) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(lab.pki_dir / "server-ca.crt"))
    context.load_cert_chain(lab.pki_dir / "client-admin.crt", lab.pki_dir / "client-admin.key")
    return context


def readyz(lab: Lab, host: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(lab.apiserver_url(host) + "/readyz?verbose", timeout=5,
                                    context=_admin(lab)) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


def label_node(lab: Lab, host: str, value: str) -> int:
    """A write through `host`'s API server: its status code."""
    request = urllib.request.Request(
        lab.apiserver_url(host) + "/api/v1/nodes/ctl-1", method="PATCH",
        data=json.dumps({"metadata": {"labels": {"lab/probe": value}}}).encode(),
        headers={"Content-Type": "application/merge-patch+json"})
    try:
        with urllib.request.urlopen(request, timeout=10, context=_admin(lab)) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def node_through(lab: Lab, host: str, query: str = "") -> tuple[int, dict]:
    """Node ctl-1 read through `host`'s API server: (status, the object or the Status)."""
    try:
        with urllib.request.urlopen(lab.apiserver_url(host) + "/api/v1/nodes/ctl-1" + query,
                                    timeout=10, context=_admin(lab)) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), json.loads(exc.read() or b"{}")


def read_node(lab: Lab, host: str, query: str = "") -> int:
    """A read through `host`'s API server: its status code."""
    return node_through(lab, host, query)[0]


def watch_through(lab: Lab, host: str) -> tuple[int, list[str]]:
    """A watch of nodes through `host`'s API server (no resourceVersion), for 1 s: its
    status and the events' types and names it sent meanwhile."""
    url = lab.apiserver_url(host) + "/api/v1/nodes?watch=1&timeoutSeconds=1"
    try:
        with urllib.request.urlopen(url, timeout=10, context=_admin(lab)) as response:
            events = [json.loads(line) for line in response.read().splitlines() if line]
            return int(response.status), [f"{e['type']} {e['object']['metadata']['name']}"
                                          for e in events]
    except urllib.error.HTTPError as exc:
        return int(exc.code), []


def answers(lab: Lab, host: str) -> bool:
    try:
        return "header" in lab.etcd_call(host, "/v3/maintenance/status", {}, timeout=1)
    except OSError:
        return False


def healthy(lab: Lab, host: str) -> bool:
    """The member says it is healthy (it has a leader), asked directly."""
    try:
        return bool(lab.etcd_call(host, "/health", timeout=1).get("health") == "true")
    except OSError:
        return False


def member_pid(lab: Lab, host: str) -> str:
    return lab.exec(host, "cat /etc/service/etcd/supervise/pid").stdout.strip()


def test_one_cluster_over_tls_and_an_api_server_without_quorum_is_not_ready(
        lab_factory) -> None:
    lab = lab_factory(CONTROLLERS, timing=TIMING, etcd=True)
    listed = lab.etcd_call("ctl-2", "/v3/cluster/member/list", {})["members"]
    assert sorted(m["name"].rsplit("-", 1)[0] for m in listed) == ["ctl-1", "ctl-2", "ctl-3"]
    assert sorted(m["peerURLs"][0] for m in listed) == sorted(
        f"https://{h.address}:2380" for h in lab.hosts)
    leaders = {lab.etcd_call(h, "/v3/maintenance/status", {})["leader"]
               for h in ("ctl-1", "ctl-2", "ctl-3")}
    assert len(leaders) == 1
    # The engine's paths, as rke2's docs read etcd on a host (no etcdctl there): the JSON
    # gateway on 127.0.0.1 with server-client.crt; without a client certificate, refused.
    tls = "/var/lib/rancher/rke2/server/tls/etcd"
    out = lab.exec("ctl-1", f"curl -sS --max-time 3 --cacert {tls}/server-ca.crt --cert "
                   f"{tls}/server-client.crt --key {tls}/server-client.key "
                   "https://127.0.0.1:2379/health").stdout
    assert json.loads(out) == {"health": "true"}
    refused = lab.exec("ctl-1", f"curl -sS --max-time 3 --cacert {tls}/server-ca.crt "
                       "https://127.0.0.1:2379/health", check=False)
    assert refused.returncode != 0
    assert readyz(lab, "ctl-1")[0] == 200 and label_node(lab, "ctl-1", "a") == 200

    # One member down: the others keep a quorum, and serve.
    lab.etcd_member("ctl-2", "stop")
    poll(lambda: not answers(lab, "ctl-2"))
    # (If ctl-2's member led, the other two elect a leader first: an election timeout.)
    poll(lambda: healthy(lab, "ctl-1") and healthy(lab, "ctl-3"))
    assert readyz(lab, "ctl-1")[0] == 200 and label_node(lab, "ctl-3", "b") == 200
    # Two down (one stopped, one paused): ctl-1's member has no quorum. Its API server
    # says so in /readyz's etcd check and refuses writes; the objects are untouched.
    lab.etcd_member("ctl-3", "pause")
    poll(lambda: readyz(lab, "ctl-1")[0] != 200)
    code, body = readyz(lab, "ctl-1")
    assert code == 500 and "[-]etcd failed" in body, body
    assert label_node(lab, "ctl-1", "c") >= 500
    # Reads of the most recent state are quorum reads too (kube-apiserver 1.30); one at
    # resourceVersion=0 ("any": the watch cache) is still answered.
    assert read_node(lab, "ctl-1") >= 500
    assert read_node(lab, "ctl-1", "?resourceVersion=0") == 200
    # Its watches require a leader (kube-apiserver's WithRequireLeader): once the member
    # has lost its leader it ends the API server's watch, whose cache then serves none (a
    # watch waits for it, here its 1 s, then 503).
    poll(lambda: watch_through(lab, "ctl-1")[0] == 503, timeout=6 * ELECTION_TIMEOUT)
    # The lab's own view keeps its objects in etcd too: without a quorum anywhere, what it
    # can say is what its cache holds (resourceVersion=0), and that is untouched.
    assert lab.api("GET", "/api/v1/nodes/ctl-1?resourceVersion=0")["metadata"]["labels"][
        "lab/probe"] == "b"
    assert lab.etcd_call("ctl-1", "/v3/maintenance/status", {}).get("errors") == [
        "etcdserver: no leader"]
    # Back: quorum again, and so readiness and writes.
    lab.etcd_member("ctl-3", "resume")
    lab.etcd_member("ctl-2", "start")
    poll(lambda: readyz(lab, "ctl-1")[0] == 200)
    assert label_node(lab, "ctl-1", "d") == 200 and read_node(lab, "ctl-1") == 200
    poll(lambda: watch_through(lab, "ctl-1")[0] == 200)

    # A watch starts from the API server's cache, with no quorum read (Cacher.Watch): with
    # its own member paused, the reads of the latest state through it fail, and a watch
    # is still answered with what its cache holds (a real one's watch of the member
    # notices a silent member only at its gRPC keepalive, 30 s and more).
    lab.etcd_member("ctl-1", "pause")
    try:
        assert read_node(lab, "ctl-1") >= 500
        status, events = watch_through(lab, "ctl-1")
        assert status == 200 and {"ADDED ctl-1", "ADDED ctl-2", "ADDED ctl-3"} <= \
            set(events), (status, events)
    finally:
        lab.etcd_member("ctl-1", "resume")


def leader_seen_by(lab: Lab, host: str) -> str | None:
    try:
        return lab.etcd_call(host, "/v3/maintenance/status", {}, timeout=1).get("leader")
    except OSError:
        return None


def test_a_leader_gone_without_handing_over_leaves_no_leader_for_an_election_timeout(
        lab_factory) -> None:
    """k3s and rke2 run their members with a 5 s election timeout and a 500 ms heartbeat
    (k3s pkg/etcd/etcd.go, cluster()), not etcd's 1 s and 100 ms: a leader that goes silent
    (paused: no hand-over) leaves the others without a new leader for at least 5 s from its
    last heartbeat, where etcd's defaults would have one within about a second."""
    lab = lab_factory(CONTROLLERS, timing=TIMING, etcd=True)
    names = [h.name for h in CONTROLLERS]
    statuses = {h: lab.etcd_call(h, "/v3/maintenance/status", {}) for h in names}
    old = statuses["ctl-1"]["leader"]
    leader = next(h for h, s in statuses.items() if s["header"]["member_id"] == old)
    others = [h for h in names if h != leader]
    paused = time.monotonic()
    lab.etcd_member(leader, "pause")
    poll(lambda: all(leader_seen_by(lab, h) not in (None, "0", old) for h in others),
         timeout=3 * ELECTION_TIMEOUT)
    # The followers last heard it at most a heartbeat (0.5 s) before the pause.
    assert time.monotonic() - paused >= ELECTION_TIMEOUT - 0.5
    lab.etcd_member(leader, "resume")
    poll(lambda: healthy(lab, leader))


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_each_api_server_keeps_its_objects_in_its_own_member(lab_factory) -> None:
    """The objects are etcd's (kube-apiserver's keys, resourceVersion the key's
    mod_revision), and each API server reads them from its own member only."""
    lab = lab_factory(CONTROLLERS, timing=TIMING, etcd=True)
    key = {"key": b64("/registry/nodes/ctl-1")}

    def stored_at(host: str, revision: str) -> tuple[str, dict]:
        """The key in `host`'s member as of `revision` (the kubelet's heartbeats write it
        meanwhile): its mod_revision and its object."""
        kv = lab.etcd_call(host, "/v3/kv/range", {**key, "revision": revision})["kvs"][0]
        return kv["mod_revision"], json.loads(base64.b64decode(kv["value"]))

    # A write through ctl-2's API server is a key in every member, ctl-3's included, and
    # the object an API server serves is that key at the object's resourceVersion.
    assert label_node(lab, "ctl-2", "through-ctl-2") == 200
    code, node = node_through(lab, "ctl-3")
    assert code == 200 and node["metadata"]["labels"]["lab/probe"] == "through-ctl-2"
    revision, stored = stored_at("ctl-3", node["metadata"]["resourceVersion"])
    assert revision == node["metadata"]["resourceVersion"]
    assert stored["metadata"]["labels"] == node["metadata"]["labels"]

    # Written straight into etcd (through ctl-1's member), as etcdctl would: every API
    # server serves it, at a revision etcd gave; there is no other copy to disagree.
    stored["metadata"]["labels"]["lab/probe"] = "straight-into-etcd"
    put = lab.etcd_call("ctl-1", "/v3/kv/put", {**key, "value": base64.b64encode(
        json.dumps(stored).encode()).decode()})
    for host in ("ctl-1", "ctl-2", "ctl-3"):
        code, node = node_through(lab, host)
        assert code == 200 and node["metadata"]["labels"]["lab/probe"] == \
            "straight-into-etcd", (host, node)
        version = node["metadata"]["resourceVersion"]
        assert int(version) >= int(put["header"]["revision"]), (host, node)
        assert stored_at(host, version)[0] == version, (host, node)

    # ctl-2's member stopped: the others keep a quorum and serve, but ctl-2's API server
    # has no member of its own and asks no other, so it cannot read the latest state;
    # what it has cached (resourceVersion=0) is all it can say.
    lab.etcd_member("ctl-2", "stop")
    poll(lambda: not answers(lab, "ctl-2"))
    poll(lambda: healthy(lab, "ctl-1") and healthy(lab, "ctl-3"))  # (an election, if it led)
    code, status = node_through(lab, "ctl-2")
    assert code == 503 and "etcd unreachable" in status["message"], status
    assert label_node(lab, "ctl-3", "while-ctl-2-is-down") == 200
    assert node_through(lab, "ctl-1")[1]["metadata"]["labels"]["lab/probe"] == \
        "while-ctl-2-is-down"
    code, cached = node_through(lab, "ctl-2", "?resourceVersion=0")
    assert code == 200 and cached["metadata"]["labels"]["lab/probe"] == "straight-into-etcd"
    # Back: its member catches up and so does its API server.
    lab.etcd_member("ctl-2", "start")
    poll(lambda: node_through(lab, "ctl-2")[1].get("metadata", {}).get("labels", {}).get(
        "lab/probe") == "while-ctl-2-is-down")


def test_a_terminating_pod_still_goes_when_the_labs_view_restarts(lab_factory) -> None:
    """The lab's view does the kubelets' part (a terminating pod is deleted once its grace
    period is over); restarted, it finds the pod terminating in etcd and still ends it."""
    lab = lab_factory(CONTROLLERS[:1], timing=TIMING, etcd=True)
    lab.api("POST", "/api/v1/namespaces/default/pods", {
        "metadata": {"name": "slow"}, "spec": {
            "nodeName": "ctl-1", "terminationGracePeriodSeconds": 3,
            "containers": [{"name": "c", "image": "lab/slow"}]}})
    request = urllib.request.Request(
        lab.apiserver_url("ctl-1") + "/api/v1/namespaces/default/pods/slow/eviction",
        method="POST", headers={"Content-Type": "application/json"}, data=json.dumps({
            "apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": "slow", "namespace": "default"}}).encode())
    with urllib.request.urlopen(request, timeout=10, context=_admin(lab)) as response:
        assert response.status == 201
    lab.exec("ctl-1", "sv restart /etc/service/lab-datastore")

    def gone() -> bool:
        try:
            names = [p["metadata"]["name"] for p in
                     lab.api("GET", "/api/v1/namespaces/default/pods")["items"]]
        except OSError:
            return False  # the view is still starting
        return "slow" not in names

    assert not gone()  # terminating: still listed
    poll(gone, timeout=10)


def test_rke2_member_outlives_its_engine_and_is_recreated_only_for_a_changed_manifest(
        lab_factory) -> None:
    lab = lab_factory(CONTROLLERS, timing=TIMING, etcd=True)
    before = member_pid(lab, "ctl-2")
    lab.exec("ctl-2", "sv -w 30 stop /etc/service/rke2-server")
    assert answers(lab, "ctl-2") and member_pid(lab, "ctl-2") == before
    lab.exec("ctl-2", "sv -w 30 start /etc/service/rke2-server")
    assert member_pid(lab, "ctl-2") == before
    # Told the manifest changed (a renewed certificate does that): the start recreates it.
    lab.etcd_manifest_changed("ctl-2")
    lab.exec("ctl-2", "sv -w 30 restart /etc/service/rke2-server")
    poll(lambda: member_pid(lab, "ctl-2") not in ("", before) and answers(lab, "ctl-2"))


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_k3s_member_ends_with_its_engine(lab_factory, how: str) -> None:
    lab = lab_factory(CONTROLLERS, distro="k3s", timing=TIMING, etcd=True)
    if how == "stop":
        lab.exec("ctl-2", "sv -w 30 stop /etc/service/k3s")
        assert not answers(lab, "ctl-2")  # stopped before the engine's stop returned
        lab.exec("ctl-2", "sv -w 30 start /etc/service/k3s")
        assert answers(lab, "ctl-2")
    else:  # a crash: the process ends, and its member with it (then runit starts both)
        lab.exec("ctl-2", "sv down /etc/service/k3s; sv kill /etc/service/k3s")
        poll(lambda: not answers(lab, "ctl-2"))
        lab.exec("ctl-2", "sv -w 30 start /etc/service/k3s")
        poll(lambda: answers(lab, "ctl-2"))
    # A paused member answers nothing; resumed, it answers again.
    lab.etcd_member("ctl-3", "pause")
    assert not answers(lab, "ctl-3")
    lab.etcd_member("ctl-3", "resume")
    poll(lambda: answers(lab, "ctl-3"))


def test_an_api_server_answers_its_first_request_after_its_member_restarted(
        lab_factory) -> None:
    """The API server keeps its connections to its member, as kube-apiserver keeps its
    etcd client's; one the member closed by restarting is dialled again, not reported as
    etcd being down (etcd's client reconnects)."""
    lab = lab_factory([HostSpec("ctl-1", "controller")], timing=TIMING, etcd=True)
    assert readyz(lab, "ctl-1")[0] == 200 and read_node(lab, "ctl-1") == 200
    lab.etcd_member("ctl-1", "stop")
    poll(lambda: not answers(lab, "ctl-1"))
    lab.etcd_member("ctl-1", "start")
    poll(lambda: healthy(lab, "ctl-1"))
    assert read_node(lab, "ctl-1") == 200
    code, body = readyz(lab, "ctl-1")
    assert code == 200, body


def test_every_controller_runs_a_member_unless_the_servers_share_an_external_datastore(
        lab_factory) -> None:
    """The default lab is the engines' default: a member on every server. etcd=False is
    their other HA topology: no member anywhere, and each server's config names the
    datastore (so cargoship's plan says it is not gated on etcd)."""
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker")],
                      timing=TIMING)
    assert lab.etcd and healthy(lab, "ctl-1")
    assert lab.exec("wrk-1", "test -e /etc/service/etcd", check=False).returncode != 0
    assert "datastore-endpoint" not in lab.exec("ctl-1", "cat /etc/rancher/rke2/config.yaml").stdout
    shared = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("ctl-2", "controller")],
                         timing=TIMING, etcd=False)
    for host in ("ctl-1", "ctl-2"):
        assert shared.exec(host, "test -e /etc/service/etcd", check=False).returncode != 0
        config = shared.exec(host, "cat /etc/rancher/rke2/config.yaml").stdout
        assert f"datastore-endpoint: {shared.api_url}" in config, config
