"""A host speaks only for itself: root on a worker names another host's node (issue 25,
point 2).

Root on wrk-1 writes `node-name: ctl-1` into its engine config. The plan then took ctl-1
for wrk-1's node, and apply cordoned and drained ctl-1, and judged wrk-1 "back" by
ctl-1's status. Two hosts naming one node is now a problem naming both; a node whose
InternalIP is none of its host's addresses is never touched for it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.cli import cargoship, edit_config
from tests.lab import HostSpec

REGISTRIES = "/etc/rancher/rke2/registries.yaml"
DROP_IN = "/etc/rancher/rke2/config.yaml.d/99-mine.yaml"


@pytest.mark.reliability("trust: a host speaks only for its own node")
def test_two_hosts_naming_one_node_is_a_problem_naming_both(lab_factory, tmp_path: Path,
                                                            tally) -> None:
    tally.case()
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker")])
    lab.exec("wrk-1", f"mkdir -p $(dirname {DROP_IN}) && echo 'node-name: CTL-1' > {DROP_IN}")
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml")
    assert result.returncode == 1, result.stdout + result.stderr
    both = f"node name ctl-1 is claimed by ctl-1 ({lab.host('ctl-1').address}) and wrk-1 " \
           f"({lab.host('wrk-1').address})"
    assert result.stdout.count(both) == 2, result.stdout  # a problem for each of them


@pytest.mark.reliability("trust: a host speaks only for its own node")
def test_a_node_that_is_not_the_hosts_own_is_never_cordoned_for_it(lab_factory,
                                                                   tmp_path: Path,
                                                                   tally) -> None:
    tally.case()
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("ctl-2", "controller"),
                       HostSpec("wrk-1", "worker")])
    # The config manages ctl-2 and wrk-1; ctl-1 is a controller it does not list.
    ctl1 = lab.host("ctl-1").address
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"].update(
        hosts=[h for h in d["spec"]["hosts"] if h["ssh"]["address"] != ctl1]))
    lab.exec("wrk-1", f"mkdir -p $(dirname {DROP_IN}) && echo 'node-name: ctl-1' > {DROP_IN}")
    lab.exec("wrk-1", f"echo 'mirrors: {{}}' > {REGISTRIES}")
    plan = tmp_path / "plan.json"
    planned = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    result = cargoship("apply", plan, "--confirm")
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert f"node ctl-1 is not wrk-1 ({lab.host('wrk-1').address})'s: its InternalIP " \
           f"{lab.host('ctl-1').address} is none of the host's addresses" in out, out
    assert "cordoned node ctl-1" not in out, out
    node = lab.api("GET", "/api/v1/nodes/ctl-1")
    assert not node["spec"].get("unschedulable"), node
    assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == "mirrors: {}\n"  # untouched


@pytest.mark.reliability("trust: a host speaks only for its own node")
def test_a_node_name_that_would_select_other_nodes_is_refused(lab_factory, tmp_path: Path,
                                                               tally) -> None:
    tally.case()
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker")])
    # Into a field selector it would read spec.nodeName=wrk-1,metadata.name!=x: every pod
    # of every node but one, for wrk-1's drain.
    lab.exec("wrk-1", f"mkdir -p $(dirname {DROP_IN}) && "
                      f"echo 'node-name: \"wrk-1,spec.nodeName!=x\"' > {DROP_IN}")
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "node name 'wrk-1,spec.nodename!=x' is not a valid Kubernetes node name" \
        in result.stdout, result.stdout
