"""The etcd quorum gate through the `cargoship` command, against real etcd members in the
lab (issue 27): a member down before the plan is a plan problem and apply refuses with
nothing changed; a member paused during a rollout stops it before the next controller,
the finished host keeping its record; a healthy rollout never leaves etcd leaderless and
never fails a request through a controller that is not restarting."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.bench.availability import Probe
from tests.e2e.cli import cargoship, cargoship_argv, edit_config
from tests.lab import FAST_NODES, HostSpec, Lab
from tests.lab.etcd import ELECTION_TIMEOUT
from tests.waiting import poller

CONTROLLERS = ["ctl-1", "ctl-2", "ctl-3"]
TIMING = FAST_NODES  # nodes watched changing within seconds
NEW_MIRROR = "https://mirror2.lab.internal:5000"
RECORDS = "/var/lib/cargoship/applied"


def etcd_lab(lab_factory, distro: str = "rke2", workers: int = 0) -> Lab:  # type: ignore[no-untyped-def]
    specs = [HostSpec(name, "controller") for name in CONTROLLERS]
    specs += [HostSpec(f"wrk-{i}", "worker") for i in range(1, workers + 1)]
    lab = lab_factory(specs, distro=distro, timing=TIMING, etcd=True)
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["options"].update(
        readyTimeoutSeconds=30, drain={"timeoutSeconds": 10}))
    return lab


def change_registries(lab: Lab) -> None:
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["engineConfig"]["registries"][
        "mirrors"]["docker.io"].update(endpoint=[NEW_MIRROR]))


def registries(lab: Lab, host: str) -> str:
    return lab.exec(host, f"cat /etc/rancher/{lab.distro}/registries.yaml").stdout


def engine_pid(lab: Lab, host: str) -> int:
    marker = Path(lab.host(host).dir) / "rancher-var" / lab.distro / "lab-engine.json"
    return int(json.loads(marker.read_text())["pid"])


poll = poller(timeout=30)


def test_a_member_down_before_the_plan_is_a_problem_and_apply_refuses(
        lab_factory, tmp_path: Path) -> None:
    lab = etcd_lab(lab_factory)
    change_registries(lab)
    plan_file = tmp_path / "plan.json"
    made = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan_file)
    assert made.returncode == 0, made.stdout + made.stderr
    assert "etcd: 3 members healthy, leader on ctl-" in cargoship(
        "plan", "-c", lab.dir / "cluster.yaml", "--verbose").stdout
    before = {h: (registries(lab, h), engine_pid(lab, h)) for h in CONTROLLERS}

    lab.etcd_member("ctl-2", "stop")
    refused = cargoship("plan", "-c", lab.dir / "cluster.yaml")
    assert refused.returncode == 1
    address = lab.host("ctl-2").address
    assert f"x ctl-2 ({address}): Gathering facts about the distro installed: etcd quorum " \
           "gate: etcd member does not answer (connection refused (not running))" \
        in refused.stdout, refused.stdout
    assert "stopping any controller would leave 1 of 3 etcd members healthy, and a quorum " \
           "needs 2" in refused.stdout

    # The plan made while it was healthy: apply's own preflight refuses it, and nothing on
    # any host changed (no file, no restart).
    applied = cargoship("apply", plan_file, "--confirm", timeout=120)
    assert applied.returncode != 0
    # The headline says nothing was changed; each problem is a line of its own under it.
    assert re.search(r"^error: the hosts no longer pass the preflight \(\d+ problem\(s\)\); "
                     r"nothing was changed on any host$", applied.stderr, re.M), applied.stderr
    assert re.search(rf"^  - ctl-2 \({re.escape(address)}\): Gathering facts about the "
                     r"distro installed: etcd quorum gate: etcd member does not answer",
                     applied.stderr, re.M), applied.stderr
    assert {h: (registries(lab, h), engine_pid(lab, h)) for h in CONTROLLERS} == before
    assert all(NEW_MIRROR not in registries(lab, h) for h in CONTROLLERS)


def test_each_controller_reads_its_member_in_one_curl(lab_factory) -> None:
    """The gate's look reads a member's status, member list and /health through one curl,
    one TLS handshake on the controller where there were three, and its API server's
    /readyz in a second (planner/facts/sh/etcd_look.sh); what it decides is unchanged."""
    lab = etcd_lab(lab_factory)
    counting = ("#!/bin/sh\nprintf '%s\\n' \"$*\" >> /run/curl-calls\n"
                "exec /usr/bin/curl \"$@\"\n")
    for host in CONTROLLERS:
        lab.exec(host, "cat > /usr/local/bin/curl && chmod 755 /usr/local/bin/curl",
                 input=counting)
    planned = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--verbose")
    assert "etcd: 3 members healthy, leader on ctl-" in planned.stdout, planned.stdout
    for host in CONTROLLERS:
        calls = lab.exec(host, "cat /run/curl-calls").stdout.splitlines()
        member = [c for c in calls if "127.0.0.1:2379" in c]
        assert len(calls) == 2 and len(member) == 1, (host, calls)
        assert [u for u in ("/v3/maintenance/status", "/v3/cluster/member/list", "/health")
                if u in member[0]] == ["/v3/maintenance/status", "/v3/cluster/member/list",
                                       "/health"], member


def test_a_member_paused_during_the_rollout_stops_it_before_the_next_controller(
        lab_factory, tmp_path: Path) -> None:
    lab = etcd_lab(lab_factory)
    change_registries(lab)
    lead(lab, "ctl-3")  # the leader's controller restarts last: ctl-1, ctl-2, then ctl-3
    plan_file = tmp_path / "plan.json"
    made = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan_file)
    assert made.returncode == 0, made.stdout + made.stderr
    plan_id = json.loads(plan_file.read_text())["plan_id"]
    # ctl-1 goes first, and while it is down ctl-3's member (the leader) is paused: ctl-1's
    # rke2 member outlives the stop, so ctl-1 and ctl-2 elect a new leader and keep a
    # quorum. ctl-1's start is held until the pause has landed (the lab's `hold-start`):
    # a start delay would race the pause on a loaded machine.
    fault = f"/var/lib/rancher/{lab.distro}/lab-fault"
    lab.exec("ctl-1", f"echo hold-start > {fault}")
    since = time.time()
    apply = subprocess.Popen([*cargoship_argv(), "apply", plan_file, "--confirm"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        poll(lambda: any(name == "stopping" and when >= since
                         for when, name in lab.events("ctl-1")), timeout=60)
        lab.etcd_member("ctl-3", "pause")
        lab.exec("ctl-1", f"rm {fault}")
        out, _ = apply.communicate(timeout=180)
    finally:
        if apply.poll() is None:
            apply.kill()
            apply.wait()
    assert apply.returncode != 0, out
    assert f"ctl-1 ({lab.host('ctl-1').address}): applied" in out, out
    # Stopped before ctl-2, saying why and what to do; ctl-3 never started either.
    assert "the etcd quorum gate refused to stop ctl-2" in out, out
    assert "etcd member does not answer (no answer within 2 s)" in out, out
    assert "fix that (the hosts already done keep their changes)" in out
    # Refused before its cordon: a cluster already short of a member is not drained.
    assert "its node was drained" not in out, out
    # As it happened, in the progress: not only in the outcome at the end.
    assert re.search(rf"\[ctl-2 \({re.escape(lab.host('ctl-2').address)}\)\] quorum gate "
                     r"refused before the cordon: .*etcd member does not answer", out), out
    assert NEW_MIRROR in registries(lab, "ctl-1")
    assert all(NEW_MIRROR not in registries(lab, h) for h in ("ctl-2", "ctl-3"))
    assert [n for w, n in lab.events("ctl-2") if w >= since] == []
    # Every host keeps its record of the run: the finished one applied, the others not.
    status = {h: json.loads(lab.exec(h, f"cat {RECORDS}/{plan_id}.json").stdout)["status"]
              for h in CONTROLLERS}
    assert status == {"ctl-1": "applied", "ctl-2": "not started", "ctl-3": "not started"}
    lab.etcd_member("ctl-3", "resume")


def slow_pod(lab: Lab, host: str, grace: int) -> None:
    """A ReplicaSet's pod on the host's node that takes `grace` seconds to terminate: the
    node's drain lasts that long."""
    lab.api("POST", "/api/v1/namespaces/default/pods", {
        "metadata": {"name": f"slow-{host}", "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "slow",
            "uid": "7c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f", "controller": True}]},
        "spec": {"nodeName": lab.host(host).spec.node_name(),
                 "terminationGracePeriodSeconds": grace,
                 "containers": [{"name": "c", "image": "lab/c:1"}]}})


def unschedulable(lab: Lab, host: str) -> bool:
    node = lab.api("GET", f"/api/v1/nodes/{lab.host(host).spec.node_name()}")
    return bool(node["spec"].get("unschedulable"))


def apply_pausing_a_member_while_ctl2_drains(
        lab: Lab, tmp_path: Path, choose: Callable[[Lab], str]) -> tuple[int, str, str, float]:
    """Plan the registries change with ctl-3 leading (so the order is ctl-1, ctl-2, ctl-3),
    apply it, and once ctl-2 is cordoned (it passed the gate's first look; a slow pod keeps
    it draining) pause the member `choose` names until apply ends, then resume it. Returns
    apply's exit code and output, the plan's id and when apply began."""
    change_registries(lab)
    slow_pod(lab, "ctl-2", grace=4)
    lead(lab, "ctl-3")  # the leader's controller restarts last: ctl-1, ctl-2, then ctl-3
    plan_file = tmp_path / "plan.json"
    made = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan_file)
    assert made.returncode == 0, made.stdout + made.stderr
    plan_id = json.loads(plan_file.read_text())["plan_id"]
    since = time.time()
    paused = ""
    apply = subprocess.Popen([*cargoship_argv(), "apply", plan_file, "--confirm"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        poll(lambda: unschedulable(lab, "ctl-2"), timeout=90)
        paused = choose(lab)
        lab.etcd_member(paused, "pause")
        out, _ = apply.communicate(timeout=180)
    finally:
        if apply.poll() is None:
            apply.kill()
            apply.wait()
        if paused:
            lab.etcd_member(paused, "resume")
    return apply.returncode, out, plan_id, since


def a_follower_but_ctl1(lab: Lab) -> str:
    """A member that is not the leader: a paused leader leaves ctl-2's evictions with no
    leader for an election's time, a drain failure before the gate's last look. Nor
    ctl-1's, whose API server cargoship asks first: its writes would fail too (the test
    below pauses it on purpose)."""
    leader = lab.etcd_call("ctl-1", "/v3/maintenance/status", {})["leader"]
    return next(h for h in ("ctl-3", "ctl-2") if lab.etcd_call(
        h, "/v3/maintenance/status", {})["header"]["member_id"] != leader)


def ctl1_as_a_follower(lab: Lab) -> str:
    """ctl-1, leadership moved off it first: a paused leader would leave the others
    leaderless for an election's time; a paused follower only takes ctl-1's own API
    server out of writing."""
    lead_elsewhere(lab, "ctl-1", to="ctl-3")
    return "ctl-1"


def test_a_member_paused_during_the_drain_stops_the_rollout_before_the_engine_stops(
        lab_factory, tmp_path: Path) -> None:
    """The gate's last look is after the drain, right before the stop: a member lost while
    ctl-2 drains (its cordon passed the gate) keeps ctl-2's engine running, and ctl-2's
    node, which cargoship cordoned, is uncordoned again."""
    lab = etcd_lab(lab_factory)
    code, out, plan_id, since = apply_pausing_a_member_while_ctl2_drains(
        lab, tmp_path, a_follower_but_ctl1)
    assert code != 0, out
    assert f"ctl-1 ({lab.host('ctl-1').address}): applied" in out, out
    assert "the etcd quorum gate refused to stop ctl-2" in out, out
    assert "etcd member does not answer (no answer within 2 s)" in out, out
    assert "its node was drained and is uncordoned again" in out, out
    assert "UNCORDON FAILED" not in out, out
    # ctl-2's engine never stopped, its files are as they were, its node is schedulable.
    assert [n for w, n in lab.events("ctl-2") if w >= since] == []
    assert NEW_MIRROR in registries(lab, "ctl-1")
    assert all(NEW_MIRROR not in registries(lab, h) for h in ("ctl-2", "ctl-3"))
    assert not unschedulable(lab, "ctl-2"), out
    assert lab.exec("ctl-2", "test -e /var/lib/cargoship/in-progress.json",
                    check=False).returncode == 1  # its marker cleared
    status = {h: json.loads(lab.exec(h, f"cat {RECORDS}/{plan_id}.json").stdout)["status"]
              for h in CONTROLLERS}
    assert status == {"ctl-1": "applied", "ctl-2": "not started", "ctl-3": "not started"}


def member_id(lab: Lab, host: str) -> str:
    return str(lab.etcd_call(host, "/v3/maintenance/status", {})["header"]["member_id"])


def lead(lab: Lab, host: str) -> None:
    """Make `host`'s member the leader (etcd's MoveLeader, asked of the current leader)."""
    wanted = member_id(lab, host)
    leader = str(lab.etcd_call(host, "/v3/maintenance/status", {})["leader"])
    if leader != wanted:
        holder = next(h for h in CONTROLLERS if member_id(lab, h) == leader)
        lab.etcd_call(holder, "/v3/maintenance/transfer-leadership", {"targetID": wanted})
    poll(lambda: all(str(lab.etcd_call(h, "/v3/maintenance/status", {})["leader"]) == wanted
                     for h in CONTROLLERS), timeout=10)


def lead_elsewhere(lab: Lab, host: str, to: str) -> None:
    """Make sure `host`'s member does not lead: if it does, hand leadership to `to`'s
    (etcd's MoveLeader, asked of the leader), then wait until every member agrees."""
    leader = str(lab.etcd_call(host, "/v3/maintenance/status", {})["leader"])
    if leader == member_id(lab, host):
        lab.etcd_call(host, "/v3/maintenance/transfer-leadership",
                      {"targetID": member_id(lab, to)})
    poll(lambda: all(str(lab.etcd_call(h, "/v3/maintenance/status", {})["leader"])
                     != member_id(lab, host) for h in CONTROLLERS), timeout=10)


def test_a_node_is_uncordoned_through_another_api_server_when_its_own_has_no_quorum(
        lab_factory, tmp_path: Path) -> None:
    """cargoship's node requests go to ctl-1's API server first. ctl-1's member paused
    while ctl-2 drains: the gate refuses ctl-2's stop, and ctl-2's node is uncordoned
    through another controller's API server, as ctl-1's refuses every write."""
    lab = etcd_lab(lab_factory)
    code, out, _, since = apply_pausing_a_member_while_ctl2_drains(
        lab, tmp_path, ctl1_as_a_follower)
    assert code != 0, out
    assert "the etcd quorum gate refused to stop ctl-2" in out, out
    assert "its node was drained and is uncordoned again" in out, out
    assert "UNCORDON FAILED" not in out, out
    # ctl-1's API server, asked first, could not answer (its member has no quorum): a
    # request it failed was handed to the next controller's, which carried the drain's
    # fresh look at the pods and the uncordon.
    assert re.search(rf"node ctl-2: [^\n]+ through the API server at https://"
                     rf"{re.escape(lab.host('ctl-1').address)}:6443 failed \(etcd "
                     r"unreachable[^\n]*asking the next controller's", out), out
    assert not unschedulable(lab, "ctl-2"), out
    assert [n for w, n in lab.events("ctl-2") if w >= since] == []
    assert all(NEW_MIRROR not in registries(lab, h) for h in ("ctl-2", "ctl-3"))


def test_a_healthy_rollout_is_never_leaderless_and_fails_no_other_controller(
        lab_factory, tmp_path: Path) -> None:
    # k3s: each controller's member stops with its engine, so the rollout really takes
    # members out of the cluster, one at a time.
    lab = etcd_lab(lab_factory, distro="k3s", workers=1)
    change_registries(lab)
    lead(lab, "ctl-1")  # first in config order: it must restart last
    plan_file = tmp_path / "plan.json"
    made = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan_file)
    assert made.returncode == 0, made.stdout + made.stderr
    assert "the leader's controller restarts last" in made.stdout, made.stdout
    since = time.time()
    with Probe(lab) as probe:
        applied = cargoship("apply", plan_file, "--confirm", timeout=300)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert f"[ctl-1 ({lab.host('ctl-1').address})] restarts last: its etcd member leads" \
        in applied.stdout, applied.stdout
    stops = {h: min(w for w, n in lab.events(h) if n == "stopping" and w >= since)
             for h in CONTROLLERS}
    assert sorted(CONTROLLERS, key=stops.__getitem__) == ["ctl-2", "ctl-3", "ctl-1"], stops
    assert all(probe.requests[h] > 30 for h in CONTROLLERS), probe.requests
    for host in CONTROLLERS:  # each restarted, its member with it
        assert any(n == "stopping" and w >= since for w, n in lab.events(host))
        assert probe.time_out(host) > 0  # the probe saw it go: it would see a loss too
    # Leaderless only for a hand-over's moment (a sample or so), never for an election
    # timeout: a quorum lost, or a leader gone without handing over, would be that long.
    assert probe.leaderless_longer_than(ELECTION_TIMEOUT) == [], \
        probe.leaderless_spells()
    # Through a controller that is not restarting, nothing fails: a failure through a
    # controller counts only inside its own engine's outage (stop to ready), or for a write
    # a leader's hand-over caught (real etcd drops it too: Probe.outside_handovers).
    assert probe.outside_handovers(since) == [], (probe.outside(since), probe.handovers())
    # The leader restarted last: the followers' restarts kept it, so etcd changed leader
    # once, at its stop (config order would have made ctl-1's stop hand over first, and a
    # later controller's restart might take the new leader down again).
    assert len(probe.handovers()) == 1, probe.handovers()


def test_a_worker_is_seen_back_through_another_api_server_when_the_one_watching_it_hangs(
        lab_factory, tmp_path: Path) -> None:
    """A restarting worker's node is watched through ctl-1's API server, whose watch cache
    its own member feeds. That member paused right after the worker's engine started
    leaves the watch silent (a real kube-apiserver's too); the node's fresh reads go to
    another controller's API server, so the worker is seen back and the apply succeeds
    rather than rolling back a healthy host at the ready timeout."""
    lab = etcd_lab(lab_factory, workers=1)
    change_registries(lab)
    plan_file = tmp_path / "plan.json"
    made = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan_file)
    assert made.returncode == 0, made.stdout + made.stderr
    # The worker's engine posts nothing until the pause has landed, however loaded the
    # machine: its start is held (the lab's `hold-start`) and released after the pause.
    # A start delay of 2 s raced the pause's `sv` in CI (the node was seen back through
    # ctl-1's watch before the member stopped: no fresh read ever failed).
    fault = f"/var/lib/rancher/{lab.distro}/lab-fault"
    lab.exec("wrk-1", f"echo hold-start > {fault}")
    apply = subprocess.Popen([*cargoship_argv(), "apply", plan_file, "--confirm"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    paused = False
    try:
        assert apply.stdout is not None
        for line in apply.stdout:
            lines.append(line)
            if not paused and "[wrk-1 (" in line and "started rke2-agent" in line:
                lab.etcd_member("ctl-1", "pause")
                paused = True
                lab.exec("wrk-1", f"rm {fault}")
        apply.wait(timeout=180)
    finally:
        if apply.poll() is None:
            apply.kill()
            apply.wait()
        if paused:
            lab.etcd_member("ctl-1", "resume")
    out = "".join(lines)
    assert paused, out
    assert apply.returncode == 0, out
    assert f"wrk-1 ({lab.host('wrk-1').address}): applied" in out, out
    assert re.search(rf"node wrk-1: reading the node through the API server at https://"
                     rf"{re.escape(lab.host('ctl-1').address)}:6443 failed \(etcd "
                     r"unreachable[^\n]*asking the next controller's", out), out
    assert not unschedulable(lab, "wrk-1") and NEW_MIRROR in registries(lab, "wrk-1")
