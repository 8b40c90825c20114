"""Plan and apply reach hosts over one SSH stack (planner/hosts: libssh2 on one event loop):
the host keys a plan records are the ones apply is pinned to; credentials are offered in
OpenSSH's order (cluster.yaml's key, the ssh-agent's, ~/.ssh/config's IdentityFile); a
host that never speaks SSH is one line at the connect timeout."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

from tests.e2e.cli import cargoship, edit_config
from tests.e2e.test_apply import REGISTRIES, cluster
from tests.lab import HostSpec


def _fingerprints(known_hosts: Path) -> dict[str, str]:
    """ssh-keygen's SHA256 fingerprint of each known_hosts line, by host name."""
    out = subprocess.run(["ssh-keygen", "-lf", str(known_hosts)], capture_output=True,
                         text=True, check=True).stdout
    return {line.split()[2]: line.split()[1] for line in out.splitlines()}


def test_a_plan_records_the_host_keys_apply_is_pinned_to(
        lab_factory, tmp_path: Path) -> None:
    lab = cluster(lab_factory, workers=1)
    lab.exec("wrk-1", f"printf 'mirrors: {{}}\\n' > {REGISTRIES}")
    log, plan_file = tmp_path / "plan.log", tmp_path / "plan.json"
    planned = cargoship("--log-file", log, "plan", "-c", lab.dir / "cluster.yaml",
                        "-out", plan_file)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    text = log.read_text()
    keys = _fingerprints(lab.dir / "known_hosts")
    for host in lab.hosts:
        assert f"{host.address}: connected, host key {keys[host.address]}" in text, text
    recorded = {h["address"]: h["host_key"] for h in json.loads(plan_file.read_text())["hosts"]}
    assert recorded == {h.address: keys[h.address] for h in lab.hosts}
    # apply's sessions are pinned to those fingerprints, and get through.
    applied = cargoship("apply", plan_file, "--confirm")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "docker.io" in lab.exec("wrk-1", f"cat {REGISTRIES}").stdout


def test_a_key_the_host_refuses_is_followed_by_ssh_configs_identity_file(
        lab_factory, tmp_path: Path) -> None:
    """cluster.yaml names a key the host does not accept; ~/.ssh/config's IdentityFile is
    one it does: offered next, it connects."""
    lab = lab_factory([HostSpec("ctl-1", "controller")], kube_api=False)
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)],
                   check=True)
    edit_config(lab.dir / "cluster.yaml",
                lambda d: d["spec"]["hosts"][0]["ssh"].update(keyPath=str(stranger)))
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host *\n  IdentityFile {lab.dir / 'id_ed25519'}\n")
    log = tmp_path / "plan.log"
    no_agent = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    result = cargoship("--log-file", log, "plan", "-c", lab.dir / "cluster.yaml",
                       "--stats", env={**no_agent, "HOME": str(home)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"key {stranger} refused" in log.read_text()
    # Still one exec for the whole read side.
    assert "max round trips per host per phase: 1" in result.stdout


def test_a_passphrase_protected_key_is_used_through_the_ssh_agent(lab_factory,
                                                                  tmp_path: Path) -> None:
    """cluster.yaml names a key that needs a passphrase; a real ssh-agent holds it. Plan and
    apply both authenticate with the agent's key; without the agent, one line says why."""
    lab = cluster(lab_factory, workers=0)
    locked = tmp_path / "locked"
    locked.write_bytes((lab.dir / "id_ed25519").read_bytes())
    locked.chmod(0o600)
    subprocess.run(["ssh-keygen", "-q", "-p", "-N", "a passphrase", "-P", "", "-f",
                    str(locked)], check=True)
    edit_config(lab.dir / "cluster.yaml",
                lambda d: [h["ssh"].update(keyPath=str(locked)) for h in d["spec"]["hosts"]])
    no_agent = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    refused = cargoship("plan", "-c", lab.dir / "cluster.yaml", env=no_agent)
    assert refused.returncode == 1
    assert f"key {locked} is passphrase-protected and no ssh-agent is running" \
        in refused.stdout + refused.stderr
    agent_sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(agent_sock)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not agent_sock.exists():
            assert time.monotonic() < deadline, "ssh-agent never listened"
            time.sleep(0.02)
        with_agent = {**no_agent, "SSH_AUTH_SOCK": str(agent_sock)}
        subprocess.run(["ssh-add", "-q", str(lab.dir / "id_ed25519")], env=with_agent,
                       check=True, capture_output=True)
        lab.exec("ctl-1", f"printf 'mirrors: {{}}\\n' > {REGISTRIES}")
        plan_file = tmp_path / "plan.json"
        planned = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan_file,
                            env=with_agent)
        assert planned.returncode == 0, planned.stdout + planned.stderr
        applied = cargoship("apply", plan_file, "--confirm", env=with_agent)
        assert applied.returncode == 0, applied.stdout + applied.stderr
        assert "docker.io" in lab.exec("ctl-1", f"cat {REGISTRIES}").stdout
    finally:
        agent.terminate()
        agent.wait(10)


def test_a_host_that_never_speaks_ssh_fails_within_the_connect_timeout(
        lab_factory) -> None:
    """A listener that accepts and says nothing (a hung sshd): the handshake on the loop
    gives up at the connect timeout with one line, and the other host is read as ever."""
    lab = lab_factory([HostSpec("ctl-1", "controller")], kube_api=False)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        silent.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(silent.accept()[0])
            except TimeoutError:
                continue

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()

    def add_silent(data: dict) -> None:  # type: ignore[type-arg]
        ssh = dict(data["spec"]["hosts"][0]["ssh"], address="127.0.0.1",
                   port=silent.getsockname()[1])
        data["spec"]["hosts"].append({"role": "worker", "ssh": ssh})
        data["spec"].setdefault("options", {})["ssh"] = {"connectTimeoutSeconds": 2}

    edit_config(lab.dir / "cluster.yaml", add_silent)
    try:
        started = time.monotonic()
        result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--verbose")
        elapsed = time.monotonic() - started
    finally:
        stop.set()
        acceptor.join(5)  # before the socket it accepts on is closed
        silent.close()
        for conn in held:
            conn.close()
    assert result.returncode == 1
    line = next(ln for ln in result.stdout.splitlines() if "Connect to hosts: 127." in ln)
    # Named as a stalled SSH server, not a TCP timeout (reliability/test_trust_ssh_stalls).
    assert "Connect to hosts: 127.0.0.1:" in line and ": connected, but the SSH server sent " \
           "no banner within 2s" in line, line
    assert "Traceback" not in result.stdout + result.stderr
    assert "connected as root to" in result.stdout  # the real host, read as ever
    assert elapsed < 15, elapsed
