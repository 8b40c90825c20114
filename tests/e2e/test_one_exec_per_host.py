"""The read side of a plan is one remote exec per host (issue 15): every phase is answered
from the host snapshot taken right after connecting, whatever the config asks for."""

from __future__ import annotations

import re
from pathlib import Path

from tests.e2e.cli import cargoship, edit_config
from tests.lab import HostSpec


def round_trips(stats: str) -> dict[str, int]:
    """Phase title -> total remote commands of that phase, from `plan --stats`."""
    rows = re.findall(r"^\s+\d+ (.{46}) +\d+ +\d+ +(\d+) +[\d.]+$", stats, re.MULTILINE)
    return {title.strip(): int(total) for title, total in rows}


def test_every_phase_reads_from_one_exec_per_host(lab_factory, tmp_path: Path) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller"),
                       HostSpec("ctl-2", "controller", user="alice"),
                       HostSpec("wrk-1", "worker", user="bob", sudo=False),
                       HostSpec("wrk-2", "worker")])

    def edit(data: dict) -> None:  # type: ignore[type-arg]
        data["spec"]["profiles"] = {"edge": {}}
        data["spec"]["hosts"][3]["profile"] = "edge"
        # Chart values are written in place (no controller restart): the kubeconfig and
        # label phases are assessed, not left for apply.
        data["spec"]["engineConfig"].update(charts={
            "rke2-ingress-nginx": {"values": {"controller": {"replicaCount": 2}}}})
        data["spec"]["options"].update(labelProfiles=True, kubeconfig={
            "enabled": True, "path": str(tmp_path / "kubeconfig"), "context": "lab"})

    edit_config(lab.dir / "cluster.yaml", edit)
    lab.exec("wrk-2", "printf 'mirrors: {}\\n' > /etc/rancher/rke2/registries.yaml")
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--stats", "--verbose")
    assert result.returncode == 1, result.stdout + result.stderr  # bob has no sudo
    trips = round_trips(result.stdout)
    assert trips["Connect to hosts"] == 4, result.stdout
    # Every phase, the assessments of every role, kubeconfig and labels included.
    assert {t: n for t, n in trips.items() if t != "Connect to hosts" and n} == {}, trips
    assert "max round trips per host per phase: 1" in result.stdout
    # Meanings unchanged: what the phases found is what they found with reads of their own.
    assert "user bob is not root and cannot run sudo without a password" in result.stdout
    assert "alice with passwordless sudo" in result.stdout
    assert "would merge context lab" in result.stdout
    assert "write-file /etc/rancher/rke2/registries.yaml" in result.stdout
    assert "write-file-in-place /var/lib/rancher/rke2/server/manifests/cargoship-" \
        "rke2-ingress-nginx.yaml" in result.stdout
    assert "clock is" not in result.stdout  # in sync: offsets measured at the read
