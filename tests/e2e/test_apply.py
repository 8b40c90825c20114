"""`cargoship apply` on lab hosts: exactly the plan, or a refusal that says why."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.e2e.cli import cargoship, edit_config
from tests.lab import HostSpec, Lab

REGISTRIES = "/etc/rancher/rke2/registries.yaml"
NEW_MIRROR = "https://mirror2.lab.internal:5000"


def cluster(lab_factory, workers: int = 3, concurrency: int | None = 2) -> Lab:  # type: ignore[no-untyped-def]
    """Three controllers and `workers` workers; `concurrency` None: the config leaves
    concurrency.workers out (its default)."""
    specs = [HostSpec(f"ctl-{i}", "controller") for i in (1, 2, 3)]
    specs += [HostSpec(f"wrk-{i}", "worker") for i in range(1, workers + 1)]
    lab = lab_factory(specs)
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["options"].update(
        concurrency={"hosts": 32} if concurrency is None else
        {"hosts": 32, "workers": concurrency}, readyTimeoutSeconds=20,
        drain={"timeoutSeconds": 10}))
    return lab


def engine_pid(lab: Lab, host: str) -> int:
    marker = Path(lab.host(host).dir) / "rancher-var" / "rke2" / "lab-engine.json"
    return int(json.loads(marker.read_text())["pid"])


def plan(lab: Lab, path: Path) -> None:
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", path)
    assert result.returncode == 0, result.stdout + result.stderr


CONTROLLERS = ["ctl-1", "ctl-2", "ctl-3"]


def test_apply_changes_on_one_controller_and_three_workers(lab_factory, tmp_path: Path) -> None:
    """(Named before it restarted two controllers, and named so by tests/mutation.) Two
    controllers and three workers restart, at concurrency.workers 2; the third controller
    gets chart values alone."""
    lab = cluster(lab_factory)
    # Drift on ctl-2, ctl-3 and all workers: they get the desired registries.yaml back.
    for host in ("ctl-2", "ctl-3", "wrk-1", "wrk-2", "wrk-3"):
        lab.exec(host, f"printf 'mirrors: {{}}\\n' > {REGISTRIES}")
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["engineConfig"].update(
        charts={"rke2-ingress-nginx": {"values": {"controller": {"replicaCount": 2}}}}))
    plan_file = tmp_path / "plan.json"
    plan(lab, plan_file)
    pids = {h.name: engine_pid(lab, h.name) for h in lab.hosts}
    peak = {"workers": 0, "controllers": 0}
    stop = threading.Event()

    def watch() -> None:  # the API's view of cordoned nodes, over time
        while not stop.is_set():
            nodes = lab.api("GET", "/api/v1/nodes")["items"]
            cordoned = [n["metadata"]["name"] for n in nodes if n["spec"].get("unschedulable")]
            peak["workers"] = max(peak["workers"], sum(n.startswith("wrk") for n in cordoned))
            peak["controllers"] = max(peak["controllers"],
                                      sum(n.startswith("ctl") for n in cordoned))
            stop.wait(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    since = time.time()
    try:
        result = cargoship("apply", plan_file, "--confirm", timeout=300)
    finally:
        stop.set()
        watcher.join()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Plan " in result.stdout and " applied; record: " in result.stdout
    # From the hosts' own side: the two controllers' engines each went down once and came
    # back, never both down at once, though two workers may be (concurrency.workers: 2).
    assert lab.down_together(CONTROLLERS, since) == [], {
        h: lab.outages(h, since) for h in CONTROLLERS}
    # And from the API's: never two controllers cordoned at once, up to two workers.
    assert 1 <= peak["workers"] <= 2 and peak["controllers"] == 1
    for host in ("ctl-2", "ctl-3"):
        assert [end for _, end in lab.outages(host, since)] != [float("inf")]
        assert len(lab.outages(host, since)) == 1, lab.outages(host, since)
    wanted = lab.exec("ctl-1", f"cat {REGISTRIES}").stdout
    for host in ("ctl-2", "ctl-3", "wrk-1", "wrk-2", "wrk-3"):
        assert lab.exec(host, f"cat {REGISTRIES}").stdout == wanted
        assert lab.exec(host, f"stat -c %a {REGISTRIES}").stdout.strip() == "600"
    # Restarted only where needed: chart values alone restart nothing (ctl-1).
    after = {h.name: engine_pid(lab, h.name) for h in lab.hosts}
    assert [h for h in pids if pids[h] != after[h]] == [
        "ctl-2", "ctl-3", "wrk-1", "wrk-2", "wrk-3"]
    assert lab.outages("ctl-1", since) == []
    chart = "/var/lib/rancher/rke2/server/manifests/cargoship-rke2-ingress-nginx.yaml"
    for host in ("ctl-1", "ctl-2", "ctl-3"):
        assert "replicaCount: 2" in lab.exec(host, f"cat {chart}").stdout
    nodes = lab.api("GET", "/api/v1/nodes")["items"]
    assert all(not n["spec"].get("unschedulable") for n in nodes)
    assert len(lab.ready_nodes()) == 6
    again = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--detailed-exitcode")
    assert again.returncode == 0, again.stdout
    # Records: on each host and next to the plan.
    record = json.loads((tmp_path / "plan.applied.json").read_text())
    assert record["ok"] is True and len(record["hosts"]) == 6  # charts on every controller
    on_host = json.loads(lab.exec("wrk-1", "cat /var/lib/cargoship/applied/"
                                           f"{record['plan_id']}.json").stdout)
    assert on_host["plan_id"] == record["plan_id"]
    # The same plan twice: refused.
    twice = cargoship("apply", plan_file, "--confirm")
    assert twice.returncode == 1 and "was already applied" in twice.stderr


def test_controllers_restart_one_at_a_time_at_the_default_concurrency(
        lab_factory, tmp_path: Path) -> None:
    """concurrency.workers left out (1): every controller's engine restarts, each back
    (its engine READY, from the host's own events) before the next one stops, and then
    the worker: never two hosts down at once."""
    lab = cluster(lab_factory, workers=1, concurrency=None)
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["engineConfig"]["registries"]
                ["mirrors"]["docker.io"].update(endpoint=[NEW_MIRROR]))
    plan_file = tmp_path / "plan.json"
    plan(lab, plan_file)
    assert "workers" not in yaml.safe_load((lab.dir / "cluster.yaml").read_text())[
        "spec"]["options"]["concurrency"]
    assert json.loads(plan_file.read_text())["desired"]["options"]["worker_concurrency"] == 1
    pids = {h.name: engine_pid(lab, h.name) for h in lab.hosts}
    since = time.time()
    result = cargoship("apply", plan_file, "--confirm", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    hosts = [h.name for h in lab.hosts]
    assert lab.down_together(hosts, since) == [], {h: lab.outages(h, since) for h in hosts}
    for host in hosts:  # each restarted, once, and back
        spans = lab.outages(host, since)
        assert len(spans) == 1 and spans[0][1] != float("inf"), (host, spans)
        assert engine_pid(lab, host) != pids[host]
        assert NEW_MIRROR in lab.exec(host, f"cat {REGISTRIES}").stdout
    # In the rollout's order: the controllers, then the worker.
    first_down = sorted((lab.outages(h, since)[0][0], h) for h in hosts)
    assert [h for _, h in first_down][-1] == "wrk-1", first_down
    assert len(lab.ready_nodes()) == 4


def test_refusals_before_any_change(lab_factory, tmp_path: Path) -> None:
    lab = cluster(lab_factory, workers=1)
    lab.exec("wrk-1", f"printf 'mirrors: {{}}\\n' > {REGISTRIES}")
    plan_file = tmp_path / "plan.json"
    plan(lab, plan_file)
    # Tampered plan.
    data = json.loads(plan_file.read_text())
    data["changes"][0]["target"] = "/etc/shadow"
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(data))
    refused = cargoship("apply", tampered, "--confirm")
    assert refused.returncode == 1 and "integrity digest does not match" in refused.stderr
    # No --confirm and no terminal.
    refused = cargoship("apply", plan_file)
    assert refused.returncode == 1 and "without --confirm" in refused.stderr
    # A host file edited between plan and apply.
    lab.exec("wrk-1", f"printf 'mirrors: {{a: {{}}}}\\n' > {REGISTRIES}")
    refused = cargoship("apply", plan_file, "--confirm")
    assert refused.returncode == 1
    assert f"{REGISTRIES} changed since the plan was made" in refused.stderr
    assert f"  - {REGISTRIES} changed since the plan was made: on wrk-1\n" in refused.stderr
    assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == "mirrors: {a: {}}\n"
    assert lab.exec("wrk-1", "test -e /run/cargoship/lock", check=False).returncode == 1


@pytest.mark.parametrize("stale", [False, True])
def test_a_lock_held_by_another_run(lab_factory, tmp_path: Path, stale: bool) -> None:
    lab = cluster(lab_factory, workers=1)
    lab.exec("wrk-1", f"printf 'mirrors: {{}}\\n' > {REGISTRIES}")
    plan_file = tmp_path / "plan.json"
    plan(lab, plan_file)
    holder = {"id": "0badc0de", "holder": "bob@ci", "pid": 7, "plan_id": None,
              "since": "2026-12-01T00:00:00Z"}
    age = "-2 min" if stale else "now"
    lab.exec("ctl-2", f"mkdir -p /run/cargoship && echo '{json.dumps(holder)}' > "
                      f"/run/cargoship/lock && touch -d '{age}' /run/cargoship/lock")
    result = cargoship("apply", plan_file, "--confirm", timeout=300)
    if stale:
        assert result.returncode == 0, result.stdout + result.stderr
        assert "0badc0de" in result.stdout  # the takeover is reported
    else:
        assert result.returncode == 1 and "bob@ci" in result.stderr
        assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == "mirrors: {}\n"
