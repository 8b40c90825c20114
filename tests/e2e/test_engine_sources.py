"""What the engine reads is what cargoship reads (issue 28): `.yml` drop-ins, the unit's
environment files and command line, a relocated config file, data-dir and
private-registry; and any setting that gives the API server another audit policy,
admission config or audit log than cluster.yaml asks for is a plan problem naming its file
and line. Through the command, on lab engines that read their config as rke2 and k3s do
(tests/lab/engine_config.py)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.cli import cargoship, edit_config
from tests.e2e.test_engine_semantics import AUDIT, FAST, engine_state, plan_and_apply
from tests.kubeapi_server import poll
from tests.lab import HostSpec

PSA = {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
       "plugins": [{"name": "PodSecurity", "configuration": {
           "apiVersion": "pod-security.admission.config.k8s.io/v1",
           "kind": "PodSecurityConfiguration",
           "defaults": {"enforce": "baseline", "enforce-version": "latest"}}}]}


def plan_json(lab) -> tuple[int, dict]:  # type: ignore[no-untyped-def,type-arg]
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--json")
    return result.returncode, json.loads(result.stdout)


def texts(plan: dict, kind: str = "problems") -> list[str]:  # type: ignore[type-arg]
    return [p["text"] for p in plan[kind]]


def test_a_yml_dropin_setting_another_audit_policy_is_a_problem_with_its_line(
        lab_factory) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller")], distro="k3s")
    # `.YML`, sorted before ours: k3s reads it (util.HasSuffixI); the API server would
    # still get two policies and keep one.
    lab.exec("ctl-1", "mkdir -p /etc/rancher/k3s/config.yaml.d && printf '# mine\\n"
                      "kube-apiserver-arg+:\\n- v=2\\n- audit-policy-file=/etc/theirs.yaml\\n' "
                      "> /etc/rancher/k3s/config.yaml.d/10-Mine.YML")
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["engineConfig"].update(
        auditPolicy=AUDIT))
    code, plan = plan_json(lab)
    assert code == 1
    assert any(t.startswith("/etc/rancher/k3s/config.yaml.d/10-Mine.YML:4: kube-apiserver-arg "
                            "sets audit-policy-file=/etc/theirs.yaml, but cluster.yaml asks "
                            "for /etc/rancher/k3s/cargoship-audit-policy.yaml")
               for t in texts(plan)), texts(plan)
    # The same path as ours is no conflict.
    lab.exec("ctl-1", "sed -i 's|/etc/theirs.yaml|/etc/rancher/k3s/cargoship-audit-policy.yaml|'"
                      " /etc/rancher/k3s/config.yaml.d/10-Mine.YML")
    code, plan = plan_json(lab)
    assert code == 0, texts(plan)


def test_rke2_users_apiserver_arg_in_config_yaml_and_env_overrides_are_problems(
        lab_factory) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller")])
    # Written, not started with: the engine reads them at its next start.
    lab.exec("ctl-1", "printf 'kube-apiserver-arg:\\n- admission-control-config-file="
                      "/etc/theirs-psa.yaml\\n' >> /etc/rancher/rke2/config.yaml && "
                      "printf 'RKE2_AUDIT_POLICY_FILE=/etc/env-audit.yaml\\n' > "
                      "/etc/default/rke2-server")
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["engineConfig"].update(
        auditPolicy=AUDIT, podSecurity=PSA))
    code, plan = plan_json(lab)
    assert code == 1
    found = texts(plan)
    # rke2 puts its own flag first and the user's kube-apiserver-arg after: theirs wins.
    assert any(t.startswith("/etc/rancher/rke2/config.yaml:3: kube-apiserver-arg sets "
                            "admission-control-config-file=/etc/theirs-psa.yaml")
               for t in found), found
    assert any(t.startswith("/etc/default/rke2-server:1 (RKE2_AUDIT_POLICY_FILE): sets "
                            "audit-policy-file=/etc/env-audit.yaml") for t in found), found


def test_k3s_keeps_the_users_own_audit_log_path(lab_factory, tmp_path: Path) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller", engine_config={
        "kube-apiserver-arg": ["audit-log-path=/var/log/mine/audit.log"]})], distro="k3s")
    edit_config(lab.dir / "cluster.yaml", lambda d: (
        d["spec"]["engineConfig"].update(auditPolicy=AUDIT),
        d["spec"]["options"].update(FAST)))
    plan_and_apply(lab, tmp_path)
    args = engine_state(lab, "ctl-1", "k3s")["apiserver_args"]
    assert [a for a in args if a.startswith("--audit-log-path=")] == [
        "--audit-log-path=/var/log/mine/audit.log"], args
    assert "--audit-policy-file=/etc/rancher/k3s/cargoship-audit-policy.yaml" in args


def test_relocated_config_data_dir_registries_and_env_node_name(lab_factory,
                                                              tmp_path: Path) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker")],
                      distro="k3s")
    # The worker's unit names its node and moves its config, whose drop-in moves the
    # registries file; the controller's unit gives data-dir on its command line.
    lab.exec("wrk-1", "mkdir -p /etc/k3s-alt/c.yaml.d && printf 'K3S_NODE_NAME=Edge-Seven\\n"
                      "K3S_CONFIG_FILE=\"/etc/k3s-alt/c.yaml\"\\n' > "
                      "/etc/systemd/system/k3s-agent.service.env && printf "
                      "'private-registry: /etc/k3s-alt/reg.yaml\\n' > /etc/k3s-alt/c.yaml.d/1.yml"
                      " && sv -w 25 restart /etc/service/k3s-agent")
    lab.exec("ctl-1", "sed -i 's|k3s server|k3s server --data-dir /var/lib/k3s-alt|' "
                      "/etc/service/k3s/run && sv -w 25 restart /etc/service/k3s")
    # A new data dir is a new etcd store (server/db/etcd under it): every node is gone
    # from the API until its kubelet posts its status again (every 10 s) and, refused,
    # registers anew, as on a real k3s server.
    poll(lambda: {"ctl-1", "edge-seven"} <= lab.ready_nodes(), timeout=30)
    edit_config(lab.dir / "cluster.yaml", lambda d: (
        d["spec"]["engineConfig"].update(
            auditPolicy=AUDIT, registries={"mirrors": {"docker.io": {
                "endpoint": ["https://mirror.lab.internal"]}}},
            charts={"traefik": {"values": {"replicas": 2}}}),
        d["spec"]["options"].update(FAST)))
    code, plan = plan_json(lab)
    assert code == 0, texts(plan)
    paths = {(c["host"]["name"], c["target"]) for c in plan["changes"]}
    assert ("wrk-1", "/etc/k3s-alt/reg.yaml") in paths, paths
    assert ("ctl-1", "/var/lib/k3s-alt/server/manifests/cargoship-traefik.yaml") in paths
    assert ("ctl-1", "/etc/rancher/k3s/config.yaml.d/50-cargoship.yaml") in paths
    said = json.dumps(plan)
    assert "node edge-seven; config file /etc/k3s-alt/c.yaml (K3S_CONFIG_FILE in " \
           "/etc/systemd/system/k3s-agent.service.env:2)" in said
    assert "node-name Edge-Seven (from /etc/systemd/system/k3s-agent.service.env:1 " \
           "(K3S_NODE_NAME))" in said
    assert "data-dir /var/lib/k3s-alt (from /etc/service/k3s/run)" in said
    _, applied = plan_and_apply(lab, tmp_path)
    assert "drained node edge-seven" in applied
    state = engine_state(lab, "wrk-1", "k3s")
    assert state["registries"] == "/etc/k3s-alt/reg.yaml" and state["node"] == "edge-seven"
    assert "mirror.lab.internal" in lab.exec("wrk-1", "cat /etc/k3s-alt/reg.yaml").stdout
    again = cargoship("plan", "-c", lab.dir / "cluster.yaml")
    assert again.returncode == 0 and "No changes" in again.stdout, again.stdout
