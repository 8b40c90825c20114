"""Apply against a lab that behaves like RKE2 where safety depends on it (issue 12).

The lab's engines take seconds to start, post node status every few seconds and leave
their node Ready until the node grace period has passed; rke2's API server (a static pod)
outlives its engine. Each host's /var/log/lab-engine/events.log says, from the host's
side, when its engine went down and when it was really serving again.
"""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.e2e.cli import cargoship, edit_config
from tests.lab import HostSpec, Lab, Timing

REGISTRIES = "/etc/rancher/rke2/registries.yaml"
NEW_MIRROR = "https://mirror2.lab.internal:5000"
# Small but in the real proportions: a start much longer than a heartbeat, a grace period
# much longer than a start (so a stale Ready outlives the whole restart).
REALISTIC = Timing(engine_start=4, kubelet_heartbeat=2, node_grace=20)
# `count=2, etcd=False`: two servers on an external datastore (k3s's "High Availability
# with an External DB"), where ctl-1 restarts first, as the tests that crash-loop it need.
# With etcd members two servers have no quorum to spare, and of three the etcd leader's
# controller restarts last, whichever that is.


def controllers(lab_factory, count: int = 3, timing: Timing | None = None,  # type: ignore[no-untyped-def]
                distro: str = "rke2", etcd: bool | None = None) -> Lab:
    lab = lab_factory([HostSpec(f"ctl-{i}", "controller") for i in range(1, count + 1)],
                      distro=distro, timing=timing, etcd=etcd)
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["options"].update(
        readyTimeoutSeconds=60, drain={"timeoutSeconds": 10}))
    return lab


def refused_audit_policy(lab: Lab) -> None:
    """An audit policy cargoship's schema accepts but kube-apiserver refuses at start: a
    change whose restart crash-loops the API server (the lab's engine_config checks it as
    kube-apiserver does)."""
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["engineConfig"].update(
        auditPolicy={"apiVersion": "audit.k8s.io/v1", "kind": "Policy",
                     "rules": [{"level": "Metadata", "namespaces": ["default"],
                                "nonResourceURLs": ["/healthz*"]}]}))


def new_mirror(data: dict) -> None:  # type: ignore[type-arg]
    data["spec"]["engineConfig"]["registries"]["mirrors"]["docker.io"]["endpoint"] = \
        [NEW_MIRROR]


def plan(lab: Lab, path: Path) -> None:
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", path)
    assert result.returncode == 0, result.stdout + result.stderr


def requested(lab: Lab, host: str, since: float) -> list[str]:
    """What the host's engine service was asked after `since` (down, up, ...), a request
    repeated in a row counted once (the restart script asks for a start again when runit
    dropped one). lab.record_service_requests(host) first."""
    asked = [command for _, command in lab.service_requests(host, since)]
    return [c for i, c in enumerate(asked) if i == 0 or c != asked[i - 1]]


def restarted_by_cargoship(lab: Lab, host: str, since: float, restarts: int = 2) -> None:
    """The host's engine was restarted by cargoship, `restarts` times (a change and its
    rollback: 2): its service asked each time to stop, then to start, and the engine
    running now is the one the last request started, READY since. Not runit's respawn of
    a crash-looping engine (what systemd's Restart=always does too), which would also come
    up on restored files with nobody having restarted anything.
    lab.record_service_requests(host) first."""
    assert requested(lab, host, since) == ["down", "up"] * restarts, \
        lab.service_requests(host, since)
    starts = lab.engine_starts(host, since)
    assert [who for _, who in starts].count("asked") == restarts, starts
    assert starts[-1][1] == "asked", starts  # no respawn after the last start asked for
    assert any(name == "ready" and when > starts[-1][0] for when, name in lab.events(host))


def test_three_controllers_one_at_a_time_with_realistic_timing(lab_factory,
                                                               tmp_path: Path) -> None:
    lab = controllers(lab_factory, timing=REALISTIC)
    edit_config(lab.dir / "cluster.yaml", new_mirror)
    plan_file = tmp_path / "plan.json"
    plan(lab, plan_file)
    since = max(when for h in lab.hosts for when, _ in lab.events(h.name))
    result = cargoship("apply", plan_file, "--confirm", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    spans = {h.name: lab.outages(h.name, since) for h in lab.hosts}
    assert all(len(s) == 1 for s in spans.values()), spans
    ordered = sorted((s[0], name) for name, s in spans.items())
    # Each controller was serving again (its engine READY: node status posted, API server
    # /readyz passing) before the next one stopped: never two controllers down at once,
    # so etcd never lost quorum.
    for (first, name), (second, after) in itertools.pairwise(ordered):
        assert first[1] < second[0], (f"{after} stopped at {second[0]:.2f} before {name} "
                                      f"was ready again at {first[1]:.2f}")
    assert all(s[0][1] != float("inf") for s in spans.values()), spans  # all back
    for name in spans:
        assert NEW_MIRROR in lab.exec(name, f"cat {REGISTRIES}").stdout
    assert len(lab.ready_nodes()) == 3


def test_transient_uncordon_failure_is_retried_not_rolled_back(lab_factory,
                                                               tmp_path: Path) -> None:
    lab = controllers(lab_factory, count=1)
    edit_config(lab.dir / "cluster.yaml", new_mirror)
    plan_file = tmp_path / "plan.json"
    plan(lab, plan_file)
    # The API refuses the next two uncordons of ctl-1 (a 503, as from an overloaded or
    # restarting API server), then takes the third.
    lab.api("POST", "/lab/v1/faults", {"method": "PATCH", "path": "/api/v1/nodes/ctl-1",
                                       "match": {"spec": {"unschedulable": False}},
                                       "code": 503, "times": 2})
    result = cargoship("apply", plan_file, "--confirm", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rolling back" not in result.stdout + result.stderr
    assert "uncordon failed" in result.stdout and "retrying" in result.stdout
    assert NEW_MIRROR in lab.exec("ctl-1", f"cat {REGISTRIES}").stdout
    node = lab.api("GET", "/api/v1/nodes/ctl-1")
    assert not node["spec"].get("unschedulable")


@pytest.mark.parametrize(("distro", "looping"), [("rke2", "kube-apiserver"), ("k3s", "k3s")])
def test_crash_looping_api_server_is_rolled_back_with_its_log(lab_factory, tmp_path: Path,
                                                              distro: str, looping: str) -> None:
    # rke2: the API server's static pod crash-loops while rke2-server waits for it; k3s:
    # the API server is inside k3s, so k3s itself does.
    lab = controllers(lab_factory, distro=distro, count=2, etcd=False)
    refused_audit_policy(lab)
    plan_file = tmp_path / "plan.json"
    plan(lab, plan_file)
    lab.record_service_requests("ctl-1")
    since = time.time()
    result = cargoship("apply", plan_file, "--confirm", timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert f"{looping} is crash-looping" in out and "rolling back" in out, out
    if distro == "rke2":
        # Seen as on a real node: the mirror pod's restart count (the lab's kubelet, like
        # the real one, keeps only the last dead container's log: counting logs can't).
        # At least the 2 it takes; more when a restart came between two of its reads.
        counted = re.search(r"\(its mirror pod counts (\d+) restart\(s\) since rke2-server "
                            r"was started\)", out)
        assert counted is not None and int(counted.group(1)) >= 2, out
    restarted_by_cargoship(lab, "ctl-1", since)
    # The API server's own words, from the host, in the failure message.
    assert "rules[0].nonResourceURLs: Invalid value" in out, out
    assert "previous files restored" in out, out
    # Well before readyTimeoutSeconds (60 s): detected from the restarts, not by timing out.
    assert "not back after" not in out, out
    assert "ctl-2" in out and "not started" in out, out  # the rollout stopped at ctl-1
    assert lab.exec("ctl-1", f"ls /etc/rancher/{distro}/cargoship-audit-policy.yaml",
                    check=False).returncode != 0
    assert len(lab.ready_nodes()) == 2


def test_a_rollback_waits_out_the_undone_pods_restarts_until_its_manifest_is_written(
        lab_factory, tmp_path: Path) -> None:
    """rke2 writes the API server's manifest only once etcd is available (staticpod.go,
    APIServer), seconds after its kubelet is up, and meanwhile the kubelet restarts the pod
    of the manifest still there. In a rollback that pod is the config being undone, still
    crash-looping: its restarts were counted as the rollback's ("ROLLBACK FAILED: ...
    crash-looping", seen in CI), and a good rollback left the node cordoned."""
    lab = controllers(lab_factory, timing=Timing(apiserver_manifest_after=6),
                      count=2, etcd=False)
    refused_audit_policy(lab)
    plan_file = tmp_path / "plan.json"
    plan(lab, plan_file)
    result = cargoship("apply", plan_file, "--confirm", timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "kube-apiserver is crash-looping (its mirror pod counts" in out, out
    assert "ROLLBACK FAILED" not in out, out
    assert "previous files restored" in out, out
    assert "left cordoned" not in out, out
    node = lab.api("GET", "/api/v1/nodes/ctl-1")
    assert not node["spec"].get("unschedulable"), node["spec"]
    assert len(lab.ready_nodes()) == 2


def kubectl() -> str:
    found = shutil.which("kubectl")
    assert found, "kubectl is not on PATH (scripts/setup.sh installs kubernetes-client)"
    return found


def test_kubectl_through_the_merged_kubeconfig(lab_factory, tmp_path: Path) -> None:
    lab = controllers(lab_factory, count=2, etcd=False)
    local = tmp_path / "kubeconfig"
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["options"].update(
        labelProfiles=True, kubeconfig={"enabled": True, "path": str(local),
                                        "context": "lab"}))
    edit_config(lab.dir / "cluster.yaml", lambda d: (
        d["spec"].update(profiles={"edge": {}}), d["spec"]["hosts"][1].update(profile="edge")))
    plan_file = tmp_path / "plan.json"
    plan(lab, plan_file)
    result = cargoship("apply", plan_file, "--confirm", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    merged = yaml.safe_load(local.read_text())
    cluster = {c["name"]: c["cluster"] for c in merged["clusters"]}["lab"]
    assert cluster["server"].startswith("https://") and cluster["certificate-authority-data"]
    user = {u["name"]: u["user"] for u in merged["users"]}["lab"]
    assert set(user) == {"client-certificate-data", "client-key-data"}
    got = subprocess.run([kubectl(), "--kubeconfig", str(local), "--context", "lab", "get",
                          "nodes", "--show-labels", "--no-headers"],
                         capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stderr
    rows = {line.split()[0]: line for line in got.stdout.splitlines()}
    assert set(rows) == {"ctl-1", "ctl-2"}
    assert all(row.split()[1] == "Ready" for row in rows.values()), got.stdout
    assert "node-role.kubernetes.io/edge=true" in rows["ctl-2"]
    assert "node-role.kubernetes.io/edge" not in rows["ctl-1"]


def test_a_restart_is_one_remote_command(lab_factory, tmp_path: Path) -> None:
    """Issue 15: stop, write and start as one remote script. Per restarted host the apply
    runs one remote command: the restart script, which sets the in-progress marker first
    and, once the host is back and uncordoned, removes it; the engine's state and the
    node are never polled. The script of the host next in line is on it before its turn
    (preloaded), and counts among that host's commands."""
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker"),
                       HostSpec("wrk-2", "worker")])
    edit_config(lab.dir / "cluster.yaml", new_mirror)
    edit_config(lab.dir / "cluster.yaml",
                lambda d: d["spec"]["options"]["concurrency"].update(workers=1))
    path = tmp_path / "plan.json"
    plan(lab, path)
    log = tmp_path / "apply.log"
    result = cargoship("--log-file", log, "apply", path, "--confirm")
    assert result.returncode == 0, result.stdout + result.stderr
    ends = {host: (status, count) for host, status, count in re.findall(
        r"DEBUG cargoship\.executor: (\S+) \(.*\): host ends: (\w+) after (\d+) remote "
        r"command\(s\)", log.read_text())}
    assert ends == {"ctl-1": ("applied", "1"), "wrk-1": ("applied", "1"),
                    "wrk-2": ("applied", "1")}, ends
    text = log.read_text()

    def at(host: str, what: str) -> int:
        found = re.search(rf"{host}(?: \(.*\))?: {what}", text)
        assert found, (host, what)
        return found.start()
    # One worker at a time: wrk-1 is preloaded as ctl-1 begins, wrk-2 as wrk-1 does.
    assert at("wrk-1", "restart script preloaded") < at("ctl-1", "host ends")
    assert at("ctl-1", "host ends") < at("wrk-2", "restart script preloaded") \
        < at("wrk-1", "host ends")
    for host in ("ctl-1", "wrk-1", "wrk-2"):
        assert NEW_MIRROR in lab.exec(host, f"cat {REGISTRIES}").stdout
        assert lab.exec(host, "ls /var/lib/cargoship/in-progress.json 2>/dev/null || true"
                        ).stdout == ""  # removed by the script itself
        assert not lab.api("GET", f"/api/v1/nodes/{host}")["spec"].get("unschedulable")
        assert [name for _, name in lab.events(host)][-3:] == ["stopped", "starting",
                                                               "ready"]


def test_a_failed_drain_runs_none_of_the_script_sent_ahead(lab_factory, tmp_path: Path) -> None:
    """The restart script goes to the host before its turn, held until its drain ends.
    A drain that fails (here an evicted pod outlives the drain's timeout) cancels it: the
    engine never stops, the file is as it was, and no shell or staged file is left on
    the host. The host next in line, whose script was sent once wrk-1's evictions were
    asked for, is not started and runs nothing of it: no marker, no staged file, no
    shell left."""
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker"),
                       HostSpec("wrk-2", "worker")])
    lab.api("POST", "/api/v1/namespaces/default/pods", {
        "metadata": {"name": "slow", "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "slow",
            "uid": "5b0c6a43-1f7e-4d55-9a59-0c1b2d3e4f50", "controller": True}]},
        "spec": {"nodeName": "wrk-1", "terminationGracePeriodSeconds": 60,
                 "containers": [{"name": "c", "image": "lab/c:1"}]}})
    edit_config(lab.dir / "cluster.yaml", new_mirror)
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["options"].update(
        concurrency={"hosts": 32, "workers": 1}, drain={"timeoutSeconds": 2}))
    path = tmp_path / "plan.json"
    plan(lab, path)
    events_before, wrk2_before = len(lab.events("wrk-1")), len(lab.events("wrk-2"))
    log = tmp_path / "apply.log"
    result = cargoship("--log-file", log, "apply", path, "--confirm")
    assert result.returncode != 0
    assert "still on the node after the" in result.stdout + result.stderr
    # Each cancelled script removed what it staged before the apply's clean-up looked.
    assert "a killed run left" not in result.stdout + result.stderr
    text = log.read_text()
    assert re.search(r"wrk-1 \(.*\): host ends: failed", text), text[-2000:]
    assert re.search(r"wrk-2 \(.*\): restart script preloaded", text), text[-2000:]
    assert not re.search(r"wrk-2 \(.*\): host begins", text)
    assert NEW_MIRROR in lab.exec("ctl-1", f"cat {REGISTRIES}").stdout  # the rest went on
    assert NEW_MIRROR not in lab.exec("wrk-1", f"cat {REGISTRIES}").stdout
    assert lab.events("wrk-1")[events_before:] == []  # never stopped
    deadline = time.monotonic() + 10  # the shell leaves once its input ends
    for host in ("wrk-1", "wrk-2"):
        while lab.exec(host, "pgrep -x -f 'sh -s' || true").stdout.strip():
            assert time.monotonic() < deadline, f"a shell is left waiting on {host}"
            time.sleep(0.05)
        # What each staged before its turn went with it.
        assert ".cargoship." not in lab.exec(host, "ls -A /etc/rancher/rke2").stdout
    assert lab.events("wrk-2")[wrk2_before:] == []  # never stopped
    assert lab.exec("wrk-2", "ls /var/lib/cargoship/in-progress.json 2>/dev/null || true"
                    ).stdout == ""
    assert NEW_MIRROR not in lab.exec("wrk-2", f"cat {REGISTRIES}").stdout


def test_a_backup_directory_made_a_link_stops_everything_before_any_change(
        lab_factory, tmp_path: Path) -> None:
    """The backup directory has become a link, which is never written through. cargoship's
    state directory is checked before the lock is even taken (it must be root's alone, its
    entries no links): the apply is refused there, on every host nothing changed: no engine
    stopped, no node cordoned, no marker set and no temp file left behind. (A staging that
    fails at a host's turn: the read-only /etc/rancher case of tests/reliability.)"""
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker")])
    edit_config(lab.dir / "cluster.yaml", new_mirror)
    path = tmp_path / "plan.json"
    plan(lab, path)
    lab.exec("wrk-1", "mkdir -p /var/lib/cargoship /tmp/elsewhere && "
                      "rm -rf /var/lib/cargoship/backups && "
                      "ln -s /tmp/elsewhere /var/lib/cargoship/backups")
    events_before = len(lab.events("wrk-1"))
    log = tmp_path / "apply.log"
    result = cargoship("--log-file", log, "apply", path, "--confirm")
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert "/var/lib/cargoship/backups is a symbolic link: refusing to use " \
           "/var/lib/cargoship; nothing was changed" in out, out
    assert "Traceback" not in out
    assert NEW_MIRROR not in lab.exec("ctl-1", f"cat {REGISTRIES}").stdout
    assert NEW_MIRROR not in lab.exec("wrk-1", f"cat {REGISTRIES}").stdout
    # No journal of an apply that never began is left on the host that took it.
    assert lab.exec("ctl-1", "ls /var/lib/cargoship/applied/ 2>/dev/null || true").stdout == ""
    assert lab.events("wrk-1")[events_before:] == []  # never stopped
    node = lab.api("GET", "/api/v1/nodes/wrk-1")
    assert not node["spec"].get("unschedulable"), node["spec"]
    assert lab.exec("wrk-1", "ls /var/lib/cargoship/in-progress.json 2>/dev/null || true"
                    ).stdout == ""
    assert ".cargoship." not in lab.exec("wrk-1", "ls -A /etc/rancher/rke2").stdout
    assert lab.exec("wrk-1", "ls -A /tmp/elsewhere").stdout == ""


def test_the_node_is_cordoned_only_once_its_marker_is_set(lab_factory, tmp_path: Path) -> None:
    """The cordon reads the node while the host sets its in-progress marker, but changes it
    only after: a run killed in between leaves a marker (the next plan recovers the host),
    never a node cordoned with nothing on the host saying why. The marker's rename is
    slowed to a second here; the node must stay schedulable all that time."""
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker")])
    edit_config(lab.dir / "cluster.yaml", new_mirror)
    path = tmp_path / "plan.json"
    plan(lab, path)
    shim = Path(lab.host("wrk-1").dir, "bin", "mv")
    shim.write_text('#!/bin/sh\ncase "$*" in *in-progress.json*) sleep 1; /bin/mv "$@"; '
                    'rc=$?; date +%s.%N > /run/marker-set-at; exit $rc;; esac\n'
                    'exec /bin/mv "$@"\n')
    shim.chmod(0o755)
    cordoned_at: list[float] = []
    done = threading.Event()

    def watch_node() -> None:  # the moment the API first says the node is unschedulable
        while not done.is_set():
            if lab.api("GET", "/api/v1/nodes/wrk-1")["spec"].get("unschedulable"):
                cordoned_at.append(time.time())
                return
            done.wait(0.01)

    watcher = threading.Thread(target=watch_node, daemon=True)
    watcher.start()
    try:
        result = cargoship("apply", path, "--confirm")
    finally:
        done.set()
        watcher.join(10)
    assert result.returncode == 0, result.stdout + result.stderr
    marker_set_at = float(lab.exec("wrk-1", "cat /run/marker-set-at").stdout)
    assert cordoned_at, "the node was never seen cordoned"
    assert cordoned_at[0] >= marker_set_at, (cordoned_at[0], marker_set_at)
    assert NEW_MIRROR in lab.exec("wrk-1", f"cat {REGISTRIES}").stdout
