"""The lab's engines behave like rke2 and k3s where apply's safety depends on it (issue 12):
stale Ready after a stop, rke2's API server outliving its engine, k3s's going down with
it, a READY-gated start, crash loops on a broken API server config, node names and config
files as the real engines read them."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.lab import FAST_NODES, HostSpec, Lab, Timing, pki
from tests.waiting import poller

TIMING = FAST_NODES  # nodes watched changing within seconds


poll = poller(timeout=20)


def readyz(lab: Lab, host: str) -> bool:
    context = ssl.create_default_context(cafile=str(lab.pki_dir / "server-ca.crt"))
    try:
        with urllib.request.urlopen(lab.apiserver_url(host) + "/readyz", timeout=2,
                                    context=context) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def ready(lab: Lab, node: str) -> str:
    conditions = lab.api("GET", f"/api/v1/nodes/{node}")["status"]["conditions"]
    return next(c["status"] for c in conditions if c["type"] == "Ready")


def events(lab: Lab, host: str) -> list[str]:
    return [name for _, name in lab.events(host)]


def test_rke2_stop_leaves_its_api_server_and_a_stale_ready_node(lab_factory) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("ctl-2", "controller")],
                      timing=TIMING)
    assert readyz(lab, "ctl-2") and ready(lab, "ctl-2") == "True"
    lab.exec("ctl-2", "sv down /etc/service/rke2-server")
    poll(lambda: events(lab, "ctl-2")[-1:] == ["stopped"])
    stopped = lab.events("ctl-2")[-1][0]
    # The static pod keeps serving, and the node reads Ready: nobody said otherwise.
    assert readyz(lab, "ctl-2")
    assert ready(lab, "ctl-2") == "True"
    poll(lambda: ready(lab, "ctl-2") == "Unknown", timeout=TIMING.node_grace + 10)
    # Not before the grace period (counted from the last status, at most one heartbeat
    # before the stop).
    assert time.time() - stopped >= TIMING.node_grace - TIMING.kubelet_heartbeat - 0.2
    assert readyz(lab, "ctl-2")
    # `sv start` waits for the engine's READY (the service's check), as systemctl start
    # waits for a Type=notify unit.
    lab.set_engine_start_delay(2)
    began = time.time()
    lab.exec("ctl-2", "sv -w 30 start /etc/service/rke2-server")
    assert time.time() - began >= 1.5
    assert events(lab, "ctl-2")[-2:] == ["starting", "ready"]
    assert ready(lab, "ctl-2") == "True"


def get(lab: Lab, host: str, path: str, cert: tuple[Path, Path] | None = None) -> int:
    context = ssl.create_default_context(cafile=str(lab.pki_dir / "server-ca.crt"))
    if cert:
        context.load_cert_chain(*cert)
    try:
        with urllib.request.urlopen(lab.apiserver_url(host) + path, timeout=5,
                                    context=context) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_api_serves_tls_with_the_lab_ca_and_client_certificates(lab_factory,
                                                                tmp_path: Path) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller")])
    admin = (lab.pki_dir / "client-admin.crt", lab.pki_dir / "client-admin.key")
    assert get(lab, "ctl-1", "/api/v1/nodes", admin) == 200
    assert get(lab, "ctl-1", "/api/v1/nodes") == 401  # no credentials
    assert get(lab, "ctl-1", "/readyz") == 200  # public, as on the real API
    # A certificate from another CA is no identity: the handshake fails.
    other = pki.issue(pki.make_ca("not-the-lab"), "system:admin", org="system:masters",
                      client=True)
    other.save(tmp_path, "other")
    try:
        code = get(lab, "ctl-1", "/api/v1/nodes", (tmp_path / "other.crt",
                                                    tmp_path / "other.key"))
    except (ssl.SSLError, urllib.error.URLError, ConnectionError):
        code = 0
    assert code in (0, 401)
    # The server certificate is the lab CA's, for 127.0.0.1 and the controller's address.
    kubeconfig = json.loads(lab.exec("ctl-1", "cat /etc/rancher/rke2/rke2.yaml").stdout)
    assert kubeconfig["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:6443"
    assert set(kubeconfig["users"][0]["user"]) == {"client-certificate-data",
                                                   "client-key-data"}
    assert lab.exec("ctl-1", "curl -sf --cacert /var/lib/rancher/rke2/server/tls/server-ca.crt"
                             " https://127.0.0.1:6443/readyz").stdout == "ok\n"


def test_k3s_api_goes_down_with_its_engine_and_a_bad_audit_policy_crash_loops(
        lab_factory) -> None:
    # On an external datastore (etcd=False): with two etcd members, ctl-2's stop would
    # take ctl-1's quorum too (test_lab_etcd.py shows that).
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("ctl-2", "controller")],
                      distro="k3s", timing=TIMING, etcd=False)
    assert readyz(lab, "ctl-2")
    lab.exec("ctl-2", "sv down /etc/service/k3s")
    poll(lambda: events(lab, "ctl-2")[-1:] == ["stopped"])
    assert not readyz(lab, "ctl-2")
    assert readyz(lab, "ctl-1")  # the other server still serves
    # An audit policy kube-apiserver refuses: k3s (the API server is inside it) exits,
    # and the supervisor starts it again and again.
    lab.exec("ctl-2", "mkdir -p /etc/rancher/k3s/config.yaml.d && printf 'apiVersion: "
                      "audit.k8s.io/v1\\nkind: Policy\\nrules: [{level: Loud}]\\n' > "
                      "/etc/rancher/k3s/audit.yaml && printf 'kube-apiserver-arg+: "
                      "[audit-policy-file=/etc/rancher/k3s/audit.yaml]\\n' > "
                      "/etc/rancher/k3s/config.yaml.d/50-audit.yaml && sv up /etc/service/k3s")
    poll(lambda: events(lab, "ctl-2").count("failed") >= 2)
    assert "ready" not in events(lab, "ctl-2")[-4:]
    log = lab.exec("ctl-2", "cat /var/log/k3s/current").stdout
    assert "Unsupported value: 'Loud'" in log
    lab.exec("ctl-2", "rm /etc/rancher/k3s/config.yaml.d/50-audit.yaml")
    poll(lambda: readyz(lab, "ctl-2"))


def test_node_names_and_config_files_as_the_engines_read_them(lab_factory) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("Wrk-A", "worker")],
                      timing=TIMING)
    assert "wrk-a" in lab.ready_nodes()  # the lowercased hostname
    # config.yaml, then config.yaml.d/*.yaml in name order: the last value of a key wins;
    # `key+` appends to the list from earlier files.
    lab.exec("Wrk-A", "mkdir -p /etc/rancher/rke2/config.yaml.d && "
                      "printf 'node-name: first\\nnode-label: [a=1]\\n' >> "
                      "/etc/rancher/rke2/config.yaml && "
                      "printf 'node-label+: [b=2]\\nnode-name: edge-7\\n' > "
                      "/etc/rancher/rke2/config.yaml.d/10-one.yaml && "
                      "printf 'node-label+: c=3\\n' > /etc/rancher/rke2/config.yaml.d/20-two.yaml "
                      "&& sv -w 25 restart /etc/service/rke2-agent")
    poll(lambda: "edge-7" in lab.ready_nodes())
    labels = lab.api("GET", "/api/v1/nodes/edge-7")["metadata"]["labels"]
    assert {k: labels.get(k) for k in "abc"} == {"a": "1", "b": "2", "c": "3"}
    assert "first" not in lab.ready_nodes()
    # A later plain key replaces what `+` built; with-node-id adds a stable suffix.
    lab.exec("Wrk-A", "printf 'node-label: [z=9]\\nwith-node-id: true\\n' > "
                      "/etc/rancher/rke2/config.yaml.d/30-three.yaml && "
                      "sv -w 25 restart /etc/service/rke2-agent")
    poll(lambda: any(n.startswith("edge-7-") for n in lab.ready_nodes()))
    name = next(n for n in lab.ready_nodes() if n.startswith("edge-7-"))
    labels = lab.api("GET", f"/api/v1/nodes/{name}")["metadata"]["labels"]
    assert labels.get("z") == "9" and "a" not in labels
    state = json.loads(lab.exec("Wrk-A", "cat /var/lib/rancher/rke2/lab-engine.json").stdout)
    assert state["node"] == name


def test_config_sources_as_the_engines_find_them(lab_factory) -> None:
    """k3s pkg/configfilearg/parser.go: `.yml` drop-ins (any case) count, directories and
    other names do not; the unit's environment file names the node unless a config file
    does; K3S_CONFIG_FILE moves the config and its `.d`; the unit's ExecStart flags win
    over the files; data-dir and private-registry move the engine's files."""
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker")],
                      timing=TIMING, distro="k3s")

    def state() -> dict:  # type: ignore[type-arg]
        return dict(json.loads(lab.exec("wrk-1", "cat /var/lib/rancher/k3s/lab-engine.json")
                               .stdout or "{}"))

    def restart() -> None:
        lab.restart_engine("wrk-1")

    lab.exec("wrk-1", "mkdir -p /etc/rancher/k3s/config.yaml.d/99-dir.yaml && "
                      "printf 'K3S_NODE_NAME=From-Env\n' > "
                      "/etc/systemd/system/k3s-agent.service.env")
    restart()
    assert state()["node"] == "from-env"  # the environment, lowercased
    lab.exec("wrk-1", "printf 'node-name: Upper-YML\n' > "
                      "/etc/rancher/k3s/config.yaml.d/10-a.YML && "
                      "printf 'node-name: ignored\n' > /etc/rancher/k3s/config.yaml.d/20-b.txt")
    restart()
    assert state()["node"] == "upper-yml"  # a file wins over the environment
    # The config moved: neither /etc/rancher/k3s/config.yaml nor its .d is read any more.
    lab.exec("wrk-1", "mkdir -p /etc/k3s-alt/c.yaml.d && printf 'node-label: [a=1]\n' > "
                      "/etc/k3s-alt/c.yaml && printf 'data-dir: /var/lib/k3s-alt\n"
                      "private-registry: /etc/k3s-alt/reg.yaml\n' > /etc/k3s-alt/c.yaml.d/1.yml && "
                      "printf 'K3S_CONFIG_FILE=/etc/k3s-alt/c.yaml\n' >> "
                      "/etc/systemd/system/k3s-agent.service.env")
    restart()
    got = state()
    assert got["node"] == "from-env" and got["config_file"] == "/etc/k3s-alt/c.yaml"
    assert got["config"]["node-label"] == ["a=1"]
    assert got["data_dir"] == "/var/lib/k3s-alt" and got["registries"] == "/etc/k3s-alt/reg.yaml"
    # A flag on the unit's command line wins over the files.
    lab.exec("wrk-1", "sed -i 's|k3s agent|k3s agent --node-name=Flagged|' "
                      "/etc/service/k3s-agent/run")
    restart()
    assert state()["node"] == "flagged"


def test_the_deploy_controller_applies_and_prunes_as_k3s_does(lab_factory) -> None:
    """k3s pkg/deploy/controller.go: manifests in subdirectories too; an emptied manifest
    prunes what it applied; a deleted one leaves its objects in place."""
    lab = lab_factory([HostSpec("ctl-1", "controller")], timing=TIMING)
    manifests = "/var/lib/rancher/rke2/server/manifests"
    configs = "/apis/helm.cattle.io/v1/namespaces/kube-system/helmchartconfigs"

    def names() -> set[str]:
        return {i["metadata"]["name"] for i in lab.api("GET", configs)["items"]}

    lab.exec("ctl-1", f"mkdir -p {manifests}/extra && printf 'apiVersion: helm.cattle.io/v1\n"
                      "kind: HelmChartConfig\nmetadata: {name: one, namespace: kube-system}\n"
                      "spec: {valuesContent: \"a: 1\"}\n' > " + f"{manifests}/extra/one.yaml"
                      " && printf 'apiVersion: helm.cattle.io/v1\nkind: HelmChartConfig\n"
                      "metadata: {name: two}\nspec: {valuesContent: \"b: 2\"}\n' > "
                      f"{manifests}/two.yml")
    poll(lambda: names() == {"one", "two"})
    lab.exec("ctl-1", f"printf '# emptied\n' > {manifests}/extra/one.yaml && "
                      f"rm {manifests}/two.yml")
    poll(lambda: names() == {"two"})  # pruned; the deleted file's object stays


def test_lab_up_takes_the_timing_flags(tmp_path: Path) -> None:
    import os

    import pytest

    if os.geteuid() != 0:
        pytest.skip("the lab needs root (namespaces)")
    work = tmp_path / "lab"
    # What the runner's shell has must not reach the hosts' services, as it would not
    # reach a real host's: PYTHONDONTWRITEBYTECODE made every engine start compile anew.
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "LAB_RUNNER_ONLY": "x"}
    up = subprocess.run([sys.executable, "-m", "tests.lab", "up", "--dir", str(work),
                         "--controllers", "1", "--engine-start-seconds", "2.5",
                         "--kubelet-heartbeat-seconds", "0.7", "--node-grace-seconds", "9"],
                        capture_output=True, text=True, timeout=120, env=env)
    try:
        assert up.returncode == 0, up.stderr
        lab = Lab.load(work)
        assert lab.timing == Timing(2.5, 0.7, 9)
        assert [name for _, name in lab.events("ctl-1")[:2]] == ["starting", "ready"]
        # The lab's first start stands for a cluster already running (Lab._write_timing):
        # the start delay is every start after it.
        lab.restart_engine("ctl-1")
        # Counted from the process's own start: the "starting" event comes only after the
        # stand-in's Python start-up, which takes over 0.5 s on a loaded CI machine.
        state = json.loads(lab.exec("ctl-1", "cat /var/lib/rancher/rke2/lab-engine.json").stdout)
        assert state["ready_after"] >= 2.5 - 0.02  # /proc's start time is in 10 ms ticks
        beats = lab.exec("ctl-1", "cat /var/lib/rancher/rke2/lab-timing.json").stdout
        assert json.loads(beats)["heartbeat"] == 0.7
        run = lab.exec("ctl-1", "cat /etc/service/lab-datastore/run").stdout
        assert "--stale-after 9" in run
        environ = lab.exec("ctl-1", f"tr '\\0' '\\n' < /proc/{state['pid']}/environ").stdout
        assert "PATH=" in environ and "LAB_RUNNER_ONLY" not in environ
        assert "PYTHONDONTWRITEBYTECODE" not in environ
        cached = lab.exec("ctl-1", "ls /usr/local/bin/__pycache__").stdout
        assert "lab_engine." in cached and "engine_config." in cached
    finally:
        subprocess.run([sys.executable, "-m", "tests.lab", "down", "--dir", str(work)],
                       capture_output=True, timeout=120)


def test_a_node_status_the_api_did_not_take_is_posted_again_within_a_second(
        lab_factory) -> None:
    # A heartbeat far longer than the wait below: only the retry can post in time.
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker")],
                      timing=Timing(engine_start=2, kubelet_heartbeat=60))

    def beat() -> str:
        conditions = lab.api("GET", "/api/v1/nodes/wrk-1")["status"]["conditions"]
        return str(next(c["lastHeartbeatTime"] for c in conditions if c["type"] == "Ready"))

    seen = len(events(lab, "wrk-1"))
    lab.exec("ctl-1", "sv down /etc/service/lab-datastore")
    lab.exec("wrk-1", "sv term /etc/service/rke2-agent")  # runsv starts it again
    # READY comes after the kubelet's first post, which failed: the datastore is down (a
    # kubelet whose API is not there yet).
    poll(lambda: "ready" in events(lab, "wrk-1")[seen:], timeout=20)
    lab.exec("ctl-1", "sv up /etc/service/lab-datastore")
    back = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())  # a post from now on

    def fresh() -> bool:
        try:
            return beat() >= back
        except OSError:
            return False  # the datastore is still starting

    poll(fresh, timeout=5)
    # Each failed try is in the engine's log, as a kubelet logs it.
    said = lab.exec("wrk-1", "cat /var/log/rke2-agent/current").stdout
    assert "Error updating node status, will retry: error getting node 'wrk-1': no answer " \
        "from the API server" in said
    assert "failed to update lease, will retry: no answer from the API server" in said


def test_a_held_start_posts_nothing_until_released(lab_factory) -> None:
    """The lab's `hold-start` (a test's hand on a start, tests/lab/engine.py): the engine
    starts but is not READY, however short its start delay, until the file is gone."""
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker")],
                      timing=TIMING)
    lab.set_engine_start_delay(0)
    fault = "/var/lib/rancher/rke2/lab-fault"
    lab.exec("wrk-1", f"echo hold-start > {fault}")
    before = len(events(lab, "wrk-1"))
    lab.exec("wrk-1", "sv term /etc/service/rke2-agent")  # runsv starts it again
    poll(lambda: events(lab, "wrk-1")[before:][-1:] == ["starting"])
    # Unheld, a start delay of 0 is READY within the same moment (the first test's
    # restart shows it): a second of nothing is the hold.
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        assert events(lab, "wrk-1")[-1] == "starting"
        assert lab.exec("wrk-1", "cd /etc/service/rke2-agent && ./check",
                        check=False).returncode != 0
        time.sleep(0.1)
    lab.exec("wrk-1", f"rm {fault}")
    poll(lambda: events(lab, "wrk-1")[-1:] == ["ready"])
