"""The lab's rke2 API server static pod as the cluster sees it (issue 27): the manifest's
uid, the mirror pod's config hash, its container's start and restart count, as rke2 and
the kubelet keep them (tests/lab/engine_mirror.py cites the sources); and the
`apiserver-late` fault, where the old pod serves on after the engine is READY."""

from __future__ import annotations

import urllib.error
from typing import Any

from tests.lab import FAST_NODES, HostSpec, Lab
from tests.waiting import poller

TIMING = FAST_NODES  # nodes watched changing within seconds
MANIFEST = "/var/lib/rancher/rke2/agent/pod-manifests/kube-apiserver.yaml"
FAULT = "/var/lib/rancher/rke2/lab-fault"


poll = poller(timeout=20)


def mirror(lab: Lab, host: str) -> tuple[str, str, int]:
    """(config hash, container startedAt or "", restartCount) of the host's mirror pod;
    ("", "", -1) while there is none: a mirror pod of an outdated config hash is deleted,
    then created again (kubernetes pkg/kubelet/pod/mirror_client.go; the kubelet's
    syncPod), so a read between the two finds none."""
    try:
        pod: dict[str, Any] = lab.api(
            "GET", f"/api/v1/namespaces/kube-system/pods/"
                   f"kube-apiserver-{lab.host(host).spec.node_name()}")
    except urllib.error.HTTPError as exc:
        if exc.code != 404:
            raise
        return "", "", -1
    status = pod["status"]["containerStatuses"][0]
    return (pod["metadata"]["annotations"]["kubernetes.io/config.hash"],
            (status["state"].get("running") or {}).get("startedAt", ""),
            status["restartCount"])


def manifest_uid(lab: Lab, host: str) -> str:
    return lab.exec(host, f"sed -n 's/^  uid: //p' {MANIFEST}").stdout.strip()


def restart(lab: Lab, host: str) -> None:
    lab.restart_engine(host)


def test_the_mirror_pod_says_which_api_server_pod_runs(lab_factory) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("ctl-2", "controller")],
                      timing=TIMING)
    uid = manifest_uid(lab, "ctl-2")
    assert len(uid) == 32
    poll(lambda: mirror(lab, "ctl-2")[0] == uid and mirror(lab, "ctl-2")[1] != "")
    _, started, count = mirror(lab, "ctl-2")

    # A restart with the same manifest: the same pod, a new container (one restart more).
    restart(lab, "ctl-2")
    assert manifest_uid(lab, "ctl-2") == uid
    poll(lambda: mirror(lab, "ctl-2")[2] == count + 1)
    assert mirror(lab, "ctl-2")[0] == uid and mirror(lab, "ctl-2")[1] >= started
    _, started, count = mirror(lab, "ctl-2")

    # A new manifest the kubelet applies late: READY with the old pod still serving and
    # its mirror pod saying so; then the new pod, from restart count 0.
    lab.exec("ctl-2", f"echo apiserver-late:3 > {FAULT}")
    restart(lab, "ctl-2")
    new = manifest_uid(lab, "ctl-2")
    assert new != uid
    assert mirror(lab, "ctl-2") == (uid, started, count)
    poll(lambda: mirror(lab, "ctl-2")[0] == new and mirror(lab, "ctl-2")[1] != "")
    assert mirror(lab, "ctl-2")[1] >= started and mirror(lab, "ctl-2")[2] == 0
