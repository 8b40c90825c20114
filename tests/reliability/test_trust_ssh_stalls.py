"""A host whose port 22 accepts the TCP connection and then stalls the SSH handshake is
named with the stage that stalled, by `plan` (directly, and behind a bastion) and by
`apply` of a plan made while the host was fine: not "timed out
(host down, or a firewall dropping port 22's packets)", which sends whoever reads it to
look for a dead host or a firewall.

wrk-1's port 22 is taken over inside its network namespace: an iptables REDIRECT sends new
connections to tests/stalling_listener.py running there (sshd keeps running, and the
connections it already has are untouched)."""

from __future__ import annotations

import select
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.e2e.cli import cargoship, edit_config
from tests.lab import HostSpec, Lab

pytestmark = pytest.mark.reliability("trust: a stalled SSH server is named by its stage")

REGISTRIES = "/etc/rancher/rke2/registries.yaml"
ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 2
STALLED = {
    "silent": f"connected, but the SSH server sent no banner within {TIMEOUT}s (an "
              "overloaded or hung sshd, a tarpit, or not an SSH server on that port; "
              "options.ssh.connectTimeoutSeconds)",
    "banner": f"connected and the SSH server sent its banner, but the key exchange did not "
              f"finish within {TIMEOUT}s (an overloaded or hung sshd; "
              "options.ssh.connectTimeoutSeconds)",
}


@contextmanager
def stalled_port_22(lab: Lab, host: str, mode: str) -> Iterator[None]:
    """New connections to `host`'s port 22 go to a listener in `mode`, until the end."""
    proc = subprocess.Popen(
        ["ip", "netns", "exec", lab.host(host).netns, sys.executable, "-m",
         "tests.stalling_listener", mode],
        cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        # It prints its port once it listens; a listener that died says why on stderr.
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        assert ready and proc.stdout is not None, "the listener never said its port"
        line = proc.stdout.readline()
        assert line.strip().isdigit(), f"{line!r} {proc.stderr.read() if proc.stderr else ''}"
        rule = f"PREROUTING -p tcp --dport 22 -j REDIRECT --to-ports {line.strip()}"
        lab.exec(host, f"iptables -t nat -A {rule}")
        try:
            yield
        finally:
            lab.exec(host, f"iptables -t nat -D {rule}")  # sshd answers new connections
    finally:
        proc.kill()
        proc.wait(10)


def _lab(lab_factory, tmp_path: Path) -> tuple[Lab, Path]:  # type: ignore[no-untyped-def]
    """ctl-1 and wrk-1, named by hostname in messages, wrk-1 with drift to apply; and the
    same cluster with wrk-1 behind ctl-1 as its bastion."""
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker")])
    lab.exec("wrk-1", f"printf 'mirrors: {{}}\\n' > {REGISTRIES}")

    def named(data: dict) -> None:  # type: ignore[type-arg]
        for host, name in zip(data["spec"]["hosts"], ("ctl-1", "wrk-1"), strict=True):
            host["hostname"] = name
        data["spec"]["options"]["ssh"] = {"connectTimeoutSeconds": TIMEOUT}

    edit_config(lab.dir / "cluster.yaml", named)
    behind = shutil.copy(lab.dir / "cluster.yaml", tmp_path / "behind-bastion.yaml")
    edit_config(behind, lambda d: d["spec"]["hosts"][1]["ssh"].update(bastion={
        "address": lab.host("ctl-1").address, "keyPath": str(lab.dir / "id_ed25519")}))
    return lab, Path(behind)


def _problem(output: str, host: str) -> str:
    """The host's line under "Problems", from its name on ("wrk-1 (10.0.0.21): ...")."""
    return next((ln.split("x ", 1)[1] for ln in output.splitlines()
                 if ln.lstrip().startswith(f"x {host}")), f"no problem for {host} in {output}")


@pytest.mark.parametrize("mode", ["silent", "banner"])
def test_a_stalled_ssh_server_is_named_with_its_stage(lab_factory, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                      mode: str) -> None:
    lab, behind = _lab(lab_factory, tmp_path)
    wrk = lab.host("wrk-1").address
    plan_file = tmp_path / "plan.json"
    planned = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan_file)
    assert planned.returncode == 0, planned.stdout + planned.stderr

    with stalled_port_22(lab, "wrk-1", mode):
        expected = f"{wrk}:22: {STALLED[mode]}"
        direct = cargoship("plan", "-c", lab.dir / "cluster.yaml")  # libssh2
        assert direct.returncode == 1, direct.stdout + direct.stderr
        assert _problem(direct.stdout, "wrk-1") == f"wrk-1 ({wrk}): Connect to hosts: {expected}"
        assert "1 host(s) ok" in direct.stdout  # ctl-1, read as ever

        bastion = cargoship("plan", "-c", behind)  # through ctl-1
        assert bastion.returncode == 1, bastion.stdout + bastion.stderr
        assert _problem(bastion.stdout, "wrk-1") == \
            f"wrk-1 ({wrk}): Connect to hosts: {expected}"

        applied = cargoship("apply", plan_file, "--confirm")
        assert applied.returncode == 1, applied.stdout + applied.stderr
        output = applied.stdout + applied.stderr
        assert f"cannot reach every host of the plan: wrk-1: {expected}" in output, output
    # Nothing was changed: wrk-1 still has its drift.
    assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == "mirrors: {}\n"
