"""The plan predicts what apply's drains will meet (issue 28): for every node it would
drain, the pods the drain would refuse (emptyDir data, as the stock traefik and
metrics-server have, without drain.deleteEmptyDirData; no controller without drain.force)
are problems, pods whose PodDisruptionBudget allows no disruption now are warnings, and the
plan says which nodes it drains and why. Apply used to meet them as "drain refused"."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.cli import cargoship, edit_config
from tests.lab import HostSpec
from tests.lab.stock import stock_pods

REGISTRIES = "/etc/rancher/rke2/registries.yaml"


def pod(name: str, node: str, *, owner: str | None = "ReplicaSet", empty_dir: bool = False,
        labels: dict[str, str] | None = None) -> dict:  # type: ignore[type-arg]
    meta: dict = {"name": name, "namespace": "kube-system",  # type: ignore[type-arg]
                  "labels": labels or {"app": name}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner, "name": name,
                                    "uid": f"uid-{name}", "controller": True}]
    spec: dict = {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}  # type: ignore[type-arg]
    if empty_dir:
        spec["volumes"] = [{"name": "data", "emptyDir": {}}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": {"phase": "Running"}}


def test_the_plan_says_what_each_drain_would_meet(lab_factory, tmp_path: Path) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker"),
                       HostSpec("wrk-2", "worker"), HostSpec("wrk-3", "worker")])
    base = "/api/v1/namespaces/kube-system/pods"
    for stock in stock_pods("rke2", {"wrk-1": ["rke2-metrics-server"],
                                     "wrk-3": ["rke2-ingress-nginx-controller"]}):
        lab.api("POST", base, stock)  # the stock metrics-server's emptyDir
    lab.api("POST", base, pod("bare", "wrk-1", owner=None))
    lab.api("POST", base, pod("dns-7f", "wrk-2", labels={"app": "dns"}))
    lab.api("POST", "/apis/policy/v1/namespaces/kube-system/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "dns", "namespace": "kube-system"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "dns"}}}})
    lab.api("POST", base, pod("web-1", "wrk-3"))
    for host in ("wrk-1", "wrk-2", "wrk-3"):
        lab.exec(host, f"printf 'mirrors: {{}}\\n' > {REGISTRIES}")
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--json")
    plan = json.loads(result.stdout)
    assert result.returncode == 1, result.stdout
    problems = [(p["host"]["name"], p["text"]) for p in plan["problems"]]
    assert problems == [("wrk-1", "the drain of node wrk-1 would be refused: "
                                  "kube-system/bare (not managed by a controller, needs force), "
                                  "kube-system/rke2-metrics-server-wrk-1 (has emptyDir data, "
                                  "needs delete_emptydir_data); set "
                                  "options.drain.deleteEmptyDirData "
                                  "(the pods' emptyDir data is lost) or options.drain.force "
                                  "(unmanaged pods are deleted for good), or move those pods "
                                  "first")], problems
    warnings = [(w["host"]["name"], w["text"]) for w in plan["warnings"]]
    assert ("wrk-2", "the drain of node wrk-2 would wait for kube-system/dns-7f "
                     "(PodDisruptionBudget kube-system/dns allows no disruption now), up to "
                     "options.drain.timeoutSeconds (300 s)") in warnings, warnings
    said = json.dumps(plan)
    assert ("would drain node wrk-3 (the engine restarts to read "
            f"{REGISTRIES}): 1 pod(s) to evict") in said
    # With the options apply needs, no problem is left: the forecast follows them.
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["options"].update(
        drain={"deleteEmptyDirData": True, "force": True}))
    again = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--json")
    assert again.returncode == 0, again.stdout


def test_a_restart_in_place_by_choice_neither_cordons_nor_drains(lab_factory,
                                                                  tmp_path: Path) -> None:
    """options.drain.when.registries: never. The stock metrics-server's emptyDir would make
    the default drain refuse (a plan problem); restarting in place, the plan says so and has
    no problem, apply restarts the engine, and the pod stays where it was: never evicted,
    the node never cordoned."""
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker")])
    base = "/api/v1/namespaces/kube-system/pods"
    [stock] = stock_pods("rke2", {"wrk-1": ["rke2-metrics-server"]})
    lab.api("POST", base, stock)
    lab.exec("wrk-1", f"printf 'mirrors: {{}}\\n' > {REGISTRIES}")
    drained = cargoship("plan", "-c", lab.dir / "cluster.yaml")
    assert drained.returncode == 1 and "the drain of node wrk-1 would be refused" \
        in drained.stdout, drained.stdout
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["options"].update(
        drain={"when": {"registries": "never"}}))
    plan_file = tmp_path / "plan.json"
    planned = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan_file)
    assert planned.returncode == 0, planned.stdout
    assert (f"would restart the engine to read {REGISTRIES} without cordoning or draining "
            "node wrk-1 (options.drain.when.registries: never; an engine restart leaves the "
            "node's containers running)") in planned.stdout, planned.stdout
    assert "! drain.when.registries: never  (NOT the default" in planned.stdout
    assert f"write-file {REGISTRIES} (restart, no drain) on wrk-1" in planned.stdout
    change = next(c for c in json.loads(plan_file.read_text())["changes"]
                  if c["target"] == REGISTRIES and c["host"]["name"] == "wrk-1")
    assert (change["action"], change["drain"], change["restart"]) == ("write-file", False, True)
    since = lab.events("wrk-1")[-1][0]
    applied = cargoship("apply", plan_file, "--confirm")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert lab.outages("wrk-1", since), "the engine was not restarted"
    assert "docker.io" in lab.exec("wrk-1", f"cat {REGISTRIES}").stdout
    name = stock["metadata"]["name"]
    assert lab.api("GET", f"{base}/{name}")["spec"]["nodeName"] == "wrk-1"  # not evicted
    # A drain of it would have been refused (deleteEmptyDirData is false): none was made.
    assert "node wrk-1 not cordoned or drained, as the plan says" in applied.stdout + \
        applied.stderr, applied.stdout
