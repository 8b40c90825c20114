"""cargoship writes what rke2 and k3s read, the way they read it: through the command, on lab
engines that merge config.yaml + config.yaml.d as the real ones do, name their nodes by the
engine's rules, and serve the API with a certificate covering tls-san and the node's own
addresses."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import subprocess
import tempfile
from pathlib import Path

import yaml

from tests.bench.fleet import start_proxy
from tests.e2e.cli import cargoship, cargoship_argv, edit_config
from tests.e2e.test_rollout_fidelity import kubectl
from tests.lab import HostSpec, Lab

AUDIT = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "rules": [{"level": "Metadata"}]}
FAST = {"concurrency": {"hosts": 32, "workers": 2}, "readyTimeoutSeconds": 30,
        "drain": {"timeoutSeconds": 10}}


def engine_state(lab: Lab, host: str, distro: str) -> dict:  # type: ignore[type-arg]
    path = Path(lab.host(host).dir) / "rancher-var" / distro / "lab-engine.json"
    return dict(json.loads(path.read_text()))


def plan_and_apply(lab: Lab, tmp_path: Path) -> tuple[str, str]:
    plan_file = tmp_path / "plan.json"
    planned = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan_file)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    applied = cargoship("apply", plan_file, "--confirm", timeout=300)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    return planned.stdout, applied.stdout


def test_k3s_users_own_apiserver_args_survive_the_audit_dropin(lab_factory,
                                                              tmp_path: Path) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller",
                                engine_config={"kube-apiserver-arg": ["v=2"]}),
                       HostSpec("wrk-1", "worker")], distro="k3s")
    edit_config(lab.dir / "cluster.yaml", lambda d: (
        d["spec"]["engineConfig"].update(auditPolicy=AUDIT),
        d["spec"]["options"].update(FAST)))
    before = engine_state(lab, "ctl-1", "k3s")["pid"]
    plan_and_apply(lab, tmp_path)
    state = engine_state(lab, "ctl-1", "k3s")
    assert state["pid"] != before  # restarted: it read the new files
    # What the engine merged from config.yaml and the drop-in, as k3s does.
    args = state["config"]["kube-apiserver-arg"]
    assert args[0] == "v=2", args
    assert "audit-policy-file=/etc/rancher/k3s/cargoship-audit-policy.yaml" in args
    dropin = lab.exec("ctl-1", "cat /etc/rancher/k3s/config.yaml.d/50-cargoship.yaml").stdout
    assert "kube-apiserver-arg+:" in dropin


def test_a_later_config_file_that_overrides_the_dropin_is_a_problem(lab_factory) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller")], distro="k3s")
    lab.exec("ctl-1", "mkdir -p /etc/rancher/k3s/config.yaml.d && printf "
                      "'kube-apiserver-arg: [v=4]\\n' > /etc/rancher/k3s/config.yaml.d/90-me.yaml")
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["engineConfig"].update(
        auditPolicy=AUDIT))
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml")
    assert result.returncode == 1, result.stdout + result.stderr
    assert ("/etc/rancher/k3s/config.yaml.d/90-me.yaml sets kube-apiserver-arg after "
            "cargoship's 50-cargoship.yaml") in result.stdout


def test_nodes_are_drained_and_labelled_under_the_engines_names(lab_factory,
                                                                tmp_path: Path) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller"),
                       HostSpec("wrk-1", "worker", engine_config={"node-name": "special-1"}),
                       HostSpec("Wrk-2", "worker")])

    def edit(data: dict) -> None:  # type: ignore[type-arg]
        data["spec"]["profiles"] = {"edge": {}}
        for entry in data["spec"]["hosts"][1:]:
            entry["profile"] = "edge"
        # cargoship's own name for the host; the engine never sees it.
        data["spec"]["hosts"][2]["hostname"] = "edge-two"
        data["spec"]["options"].update(labelProfiles=True, **FAST)

    edit_config(lab.dir / "cluster.yaml", edit)
    for host in ("wrk-1", "Wrk-2"):  # drifted: both are drained and restarted
        lab.exec(host, "printf 'mirrors: {}\\n' > /etc/rancher/rke2/registries.yaml")
    planned, applied = plan_and_apply(lab, tmp_path)
    assert "not registered" not in planned
    # Labels of nodes being restarted are assessed when their turn comes (unassessed now).
    for node in ("special-1", "wrk-2"):
        assert f"cordoned node {node}" in applied and f"drained node {node}" in applied
        assert f"labelled node {node} with node-role.kubernetes.io/edge=true" in applied
    for node in ("special-1", "wrk-2"):
        got = lab.api("GET", f"/api/v1/nodes/{node}")
        assert got["metadata"]["labels"]["node-role.kubernetes.io/edge"] == "true"
        assert not got["spec"].get("unschedulable")
    names = {n["metadata"]["name"] for n in lab.api("GET", "/api/v1/nodes")["items"]}
    assert names == {"ctl-1", "special-1", "wrk-2"}  # no node under a name of ours


def _merged_cluster(local: Path) -> dict:  # type: ignore[type-arg]
    merged = yaml.safe_load(local.read_text())
    return dict({c["name"]: c["cluster"] for c in merged["clusters"]}["lab"])


def test_kubeconfig_server_is_covered_by_the_certificate_not_the_ssh_address(
        lab_factory, tmp_path: Path) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker")])
    ctl = lab.host("ctl-1")
    # The controller is reached over SSH through a port forward on 127.0.0.1 (a NAT's).
    proxy = start_proxy(tmp_path, [ctl.address], delay_ms=0)
    try:
        known = tmp_path / "known_hosts"
        key = next(line.split(" ", 1)[1] for line in
                   (lab.dir / "known_hosts").read_text().splitlines()
                   if line.startswith(ctl.address + " "))
        known.write_text((lab.dir / "known_hosts").read_text()
                         + f"[127.0.0.1]:{proxy.ports[ctl.address]} {key}")
        local = tmp_path / "kubeconfig"

        def edit(data: dict) -> None:  # type: ignore[type-arg]
            for entry in data["spec"]["hosts"]:
                entry["ssh"]["knownHosts"] = str(known)
            data["spec"]["hosts"][0]["ssh"].update(address="127.0.0.1",
                                                   port=proxy.ports[ctl.address])
            data["spec"]["options"].update(kubeconfig={"enabled": True, "path": str(local),
                                                       "context": "lab"})

        edit_config(lab.dir / "cluster.yaml", edit)
        planned, _ = plan_and_apply(lab, tmp_path)
    finally:
        proxy.stop()
    assert (f"would merge context lab (server https://{ctl.address}:6443, from the "
            "controller's own address)") in planned, planned
    assert _merged_cluster(local)["server"] == f"https://{ctl.address}:6443"
    got = subprocess.run([kubectl(), "--kubeconfig", str(local), "--context", "lab", "get",
                          "nodes", "--no-headers"], capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stderr  # TLS verified against the lab's CA
    assert {line.split()[0] for line in got.stdout.splitlines()} == {"ctl-1", "wrk-1"}


def test_kubeconfig_server_defaults_to_the_engines_tls_san(lab_factory, tmp_path: Path) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller",
                                engine_config={"tls-san": ["api.lab.internal"]})])
    local = tmp_path / "kubeconfig"
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["options"].update(
        kubeconfig={"enabled": True, "path": str(local), "context": "lab"}))
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert ("would merge context lab (server https://api.lab.internal:6443, from the "
            "engine's tls-san)") in result.stdout
    # The certificate the controller serves covers that name: a TLS client checking the
    # name against the cluster's CA (from the admin kubeconfig) accepts it.
    admin = yaml.safe_load(lab.exec("ctl-1", "cat /etc/rancher/rke2/rke2.yaml").stdout)
    ca = base64.b64decode(admin["clusters"][0]["cluster"]["certificate-authority-data"])
    with tempfile.NamedTemporaryFile(suffix=".crt") as ca_file:
        ca_file.write(ca)
        ca_file.flush()
        context = ssl.create_default_context(cafile=ca_file.name)
        with socket.create_connection((lab.host("ctl-1").address, 6443), timeout=10) as raw, \
                context.wrap_socket(raw, server_hostname="api.lab.internal") as tls:
            assert tls.version()


def test_a_user_helm_chart_config_of_the_same_name_is_reported(lab_factory) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker")])
    manifests = "/var/lib/rancher/rke2/server/manifests"
    lab.exec("ctl-1", f"mkdir -p {manifests} && printf 'apiVersion: helm.cattle.io/v1\\n"
                      "kind: HelmChartConfig\\nmetadata:\\n  name: rke2-ingress-nginx\\n"
                      "  namespace: kube-system\\nspec:\\n  valuesContent: |-\\n"
                      f"    controller: {{replicaCount: 3}}\\n' > {manifests}/ingress-mine.yaml")
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["engineConfig"].update(
        charts={"rke2-ingress-nginx": {"values": {"controller": {"replicaCount": 2}}}}))
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    plan = json.loads(result.stdout)
    texts = [p["text"] for p in plan["problems"]]
    assert any(f"HelmChartConfig kube-system/rke2-ingress-nginx is also defined in "
               f"{manifests}/ingress-mine.yaml" in t for t in texts), texts
    assert not [c for c in plan["changes"] if "rke2-ingress-nginx" in c["path"]]
    # The user's file is theirs: never planned for deletion or rewrite.
    assert not [c for c in plan["changes"] if "ingress-mine" in c["path"]]


def test_a_failing_kubeconfig_step_after_the_rollout_keeps_every_host_record(
        lab_factory, tmp_path: Path) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker"),
                       HostSpec("wrk-2", "worker")])
    kube_dir = tmp_path / "kube"
    kube_dir.mkdir()
    local = kube_dir / "config"
    local.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "clusters": [],
                                     "users": [], "contexts": []}))
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["options"].update(
        kubeconfig={"enabled": True, "path": str(local), "context": "lab"}, **FAST))
    for host in ("wrk-1", "wrk-2"):
        lab.exec(host, "printf 'mirrors: {}\\n' > /etc/rancher/rke2/registries.yaml")
    plan_file = tmp_path / "plan.json"
    planned = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan_file)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    # The local kubeconfig's directory turns read-only (a full disk would do the same):
    # readable as planned, so the drift check passes; the merge's write fails.
    applied = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         f"mount --bind {kube_dir} {kube_dir} && mount -o remount,bind,ro {kube_dir} && "
         'exec "$@"', "sh", *cargoship_argv(), "apply", str(plan_file), "--confirm"],
        capture_output=True, text=True, timeout=300)
    assert applied.returncode == 1, applied.stdout + applied.stderr
    assert "merge-kubeconfig failed: cannot write" in applied.stdout, applied.stdout
    assert "Apply FAILED" in applied.stdout and "step merge-kubeconfig failed" in applied.stdout
    assert "2 host(s) changed" in applied.stdout
    history = json.loads(cargoship("history", "-c", lab.dir / "cluster.yaml", "--json").stdout)
    entry = history["plans"][0]
    by_host = {c["host"]["name"]: c["status"] for c in entry["changes"] if c["host"]}
    assert by_host == {"wrk-1": "done", "wrk-2": "done"}, entry
    kube = [c for c in entry["changes"] if c["action"] == "merge-kubeconfig"]
    assert kube and kube[0]["status"] == "failed"
    # Every host holds its record of the run, the unchanged controller included.
    for host in ("ctl-1", "wrk-1", "wrk-2"):
        record = lab.exec(host, "cat /var/lib/cargoship/applied/*.json").stdout
        assert json.loads(record)["plan_id"] == json.loads(plan_file.read_text())["plan_id"]


PLUGIN = '''
from planner.phases.base import Phase


class ReadsNodeWritesY(Phase):
    title = "Site check B: reads the node, writes /etc/site-y"

    def reads(self, ctx, host):
        return frozenset({"node"}) if host.config.role == "worker" else frozenset()

    def may_write(self, ctx, host):
        return frozenset({"file:/etc/site-y"}) if host.config.role == "worker" else frozenset()

    def assess(self, ctx, hosts):
        for host in hosts:
            ctx.found(self.title, host, "node read, /etc/site-y stays")
        return set()


class ReadsY(Phase):
    title = "Site check C: reads /etc/site-y"

    def reads(self, ctx, host):
        return frozenset({"file:/etc/site-y"}) if host.config.role == "worker" else frozenset()

    def assess(self, ctx, hosts):
        for host in hosts:
            ctx.found(self.title, host, "/etc/site-y read")
        return set()


def phases():
    return [ReadsNodeWritesY(), ReadsY()]
'''


def install_plugin(tmp_path: Path, name: str, entry: str, module: str | None = None) -> Path:
    """An installed distribution declaring a phase plugin: a dist-info on a PYTHONPATH."""
    plugins = tmp_path / "plugins"
    info = plugins / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[cargoship.phases]\n{entry}\n")
    if module is not None:
        (plugins / f"{name}.py").write_text(module)
    return plugins


def test_unassessed_is_transitive_through_plugin_phases(lab_factory, tmp_path: Path) -> None:
    """A (the shipped worker sync) restarts wrk-1, so it changes wrk-1's node; B reads that
    node and may write y; C reads y: on wrk-1 both B and C are unassessed, on wrk-2 (no
    change) both are assessed."""
    plugins = install_plugin(tmp_path, "site_phases", "site = site_phases:phases", PLUGIN)
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker"),
                       HostSpec("wrk-2", "worker")])
    lab.exec("wrk-1", "printf 'mirrors: {}\\n' > /etc/rancher/rke2/registries.yaml")
    env = {"PYTHONPATH": str(plugins)}
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--json", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    plan = json.loads(result.stdout)
    unassessed = [(u["phase"], u["host"]["name"], u["reason"]) for u in plan["unassessed"]
                  if u["phase"].startswith("Site check")]
    assert unassessed == [
        ("Site check B: reads the node, writes /etc/site-y", "wrk-1",
         "reads its node object, which 'Sync Registry Config Worker' would change first"),
        ("Site check C: reads /etc/site-y", "wrk-1",
         "reads /etc/site-y, which 'Site check B: reads the node, writes /etc/site-y' may "
         "change first (it could not be assessed either)"),
    ]
    text = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--verbose", env=env).stdout
    assert "wrk-2 (" in text and "/etc/site-y read" in text  # C assessed on wrk-2
    # Nothing at apply time can finish what C could not assess: apply refuses it untouched.
    plan_file = tmp_path / "plan.json"
    assert cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan_file,
                     env=env).returncode == 0
    refused = cargoship("apply", plan_file, "--confirm", env=env)
    assert refused.returncode == 1, refused.stderr
    assert "an item unassessed on wrk-1" in refused.stderr and "no action anything could " \
        "finish" in refused.stderr, refused.stderr
    assert lab.exec("wrk-1", "cat /etc/rancher/rke2/registries.yaml").stdout == "mirrors: {}\n"


def test_a_broken_phase_plugin_is_one_line_naming_it(lab_factory, tmp_path: Path) -> None:
    plugins = install_plugin(tmp_path, "bad", "bad = no_such_module:phases")
    lab = lab_factory([HostSpec("ctl-1", "controller")])
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", env={"PYTHONPATH": str(plugins)})
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith(
        "error: phase plugin bad (no_such_module:phases): ModuleNotFoundError"), result.stderr
