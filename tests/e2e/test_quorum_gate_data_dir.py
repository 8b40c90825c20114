"""The etcd quorum gate and rke2's API server checks where the engines keep their data
elsewhere (`data-dir`), through the `cargoship` command against the lab (issue 27).

The member's client certificates are in `<data-dir>/server/tls/etcd`. Read from the
default place instead, every controller of such a cluster looked like one without
embedded etcd, and the plan said "not gated on etcd": a rollout could then stop a second
member of three."""

from __future__ import annotations

import time
from pathlib import Path

from tests.e2e.cli import cargoship
from tests.e2e.test_quorum_gate import CONTROLLERS, change_registries, etcd_lab, poll
from tests.e2e.test_rollout_fidelity import controllers, refused_audit_policy
from tests.lab import Lab

MOVED = "/var/lib/rancher/rke2-data"
DROPINS = "/etc/rancher/rke2/config.yaml.d"


def move_data(lab: Lab, host: str) -> None:
    """What an operator does to move a server's data: stop the engine and its static pods
    (rke2's etcd and kube-apiserver outlive the engine), move server/ and agent/, set
    data-dir, start the engine again. One controller at a time: the others keep a quorum."""
    since = time.time()
    engine = f"/etc/service/{lab.engine_service(host)}"
    lab.exec(host, f"sv -w 30 down {engine} && for s in /etc/service/etcd "
                   f"/etc/service/kube-apiserver; do [ ! -d $s ] || sv -w 30 down $s; done"
                   f" && mkdir -p {MOVED} && mv /var/lib/rancher/rke2/server "
                   f"/var/lib/rancher/rke2/agent {MOVED}/"
                   f" && mkdir -p {DROPINS} && printf 'data-dir: {MOVED}\\n' > "
                   f"{DROPINS}/05-data-dir.yaml && sv up {engine}")
    poll(lambda: any(name == "ready" and when >= since for when, name in lab.events(host)),
         timeout=60)


def test_the_gate_reads_the_members_where_data_dir_puts_them(lab_factory,
                                                              tmp_path: Path) -> None:
    lab = etcd_lab(lab_factory)
    for host in CONTROLLERS:
        move_data(lab, host)
    # Nothing of the engines' data is left in the default place.
    assert lab.exec("ctl-1", "ls /var/lib/rancher/rke2/server 2>&1 || true").stdout.strip() \
        .endswith("No such file or directory")
    change_registries(lab)

    healthy = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--verbose")
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert "etcd: 3 members healthy, leader on ctl-" in healthy.stdout, healthy.stdout
    assert "not gated" not in healthy.stdout
    assert f"data-dir {MOVED}" in healthy.stdout

    lab.etcd_member("ctl-2", "stop")
    refused = cargoship("plan", "-c", lab.dir / "cluster.yaml")
    assert refused.returncode == 1, refused.stdout
    assert "ctl-2" in refused.stdout and "etcd member does not answer" in refused.stdout, \
        refused.stdout
    assert "stopping any controller would leave 1 of 3 etcd members healthy" \
        in refused.stdout


def test_an_rke2_api_server_crash_loop_is_seen_where_data_dir_puts_its_manifest(
        lab_factory, tmp_path: Path) -> None:
    """The mirror pod's checks read the static pod's manifest under data-dir: read from the
    default place, the manifest was "none", the crash loop went unseen by the mirror pod
    and the new-API-server check was skipped."""
    lab = controllers(lab_factory, count=2, etcd=False)  # ctl-1 first: see controllers()
    move_data(lab, "ctl-1")
    assert lab.exec("ctl-1", f"test -f {MOVED}/agent/pod-manifests/kube-apiserver.yaml "
                             "&& ! test -e /var/lib/rancher/rke2/agent", check=False) \
        .returncode == 0
    refused_audit_policy(lab)
    plan_file = tmp_path / "plan.json"
    made = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan_file)
    assert made.returncode == 0, made.stdout + made.stderr
    result = cargoship("apply", plan_file, "--confirm", timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "kube-apiserver is crash-looping (its mirror pod counts" in out, out
    assert "previous files restored" in out, out
