"""The lab itself, through its command-line contract and over real SSH."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import paramiko
import pytest

from tests.lab import HostSpec, Lab
from tests.waiting import poller

LAB = [sys.executable, "-m", "tests.lab"]


def ssh(lab: Lab, host: str, command: str, user: str = "root") -> tuple[int, str]:
    client = paramiko.SSHClient()
    client.load_host_keys(str(lab.dir / "known_hosts"))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(lab.host(host).address, username=user,
                   key_filename=str(lab.dir / "id_ed25519"), look_for_keys=False,
                   allow_agent=False, timeout=10)
    try:
        _, stdout, _ = client.exec_command(command)
        out = stdout.read().decode()
        return stdout.channel.recv_exit_status(), out
    finally:
        client.close()


poll = poller(timeout=20)


def test_cli_contract_up_exec_ls_down(tmp_path: Path) -> None:
    lab_dir = tmp_path / "lab"
    up = subprocess.run([*LAB, "up", "--dir", str(lab_dir), "--controllers", "1", "--workers",
                         "2", "--os", "rocky-9,debian-12"], capture_output=True, text=True)
    try:
        assert up.returncode == 0, up.stderr
        rows = up.stdout.splitlines()
        assert [r.split()[0] for r in rows] == ["ctl-1", "wrk-1", "wrk-2"]
        assert "rocky-9" in rows[0] and "debian-12" in rows[1] and "rocky-9" in rows[2]
        assert (lab_dir / "cluster.yaml").exists()
        again = subprocess.run([*LAB, "up", "--dir", str(lab_dir)], capture_output=True,
                               text=True)
        assert again.returncode == 1 and "already holds a lab" in again.stderr
        result = subprocess.run([*LAB, "exec", "--dir", str(lab_dir), "wrk-1", "--", "sh",
                                 "-c", "hostname; grep ^ID= /etc/os-release; exit 3"],
                                capture_output=True, text=True)
        assert result.returncode == 3
        assert result.stdout.split() == ["wrk-1", "ID=debian"]
        listing = subprocess.run([*LAB, "ls", "--dir", str(lab_dir)], capture_output=True,
                                 text=True, check=True)
        assert listing.stdout == up.stdout

        # A member by hand: its status, paused (SIGSTOP: it answers nothing), resumed.
        def etcd(*argv: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([*LAB, "etcd", "--dir", str(lab_dir), *argv],
                                  capture_output=True, text=True, timeout=60)

        status = etcd("ctl-1", "status")
        assert status.returncode == 0 and "header" in json.loads(status.stdout), status
        assert etcd("ctl-1", "pause").returncode == 0
        paused = etcd("ctl-1", "status")
        assert paused.returncode == 1 and paused.stderr.startswith(
            "lab: the etcd member on ctl-1 does not answer:"), paused
        assert len(paused.stderr.splitlines()) == 1, paused.stderr
        assert etcd("ctl-1", "resume").returncode == 0
        assert etcd("ctl-1", "status").returncode == 0
        worker = etcd("wrk-1", "stop")
        assert worker.returncode == 1 and "wrk-1 runs no etcd member" in worker.stderr, worker
    finally:
        tag = Lab.load(lab_dir).tag
    index = up.stdout.split()[2].split(".")[1]
    # The bridge by its ifindex: the kernel never hands that out again soon, while the
    # bridge's name (by lab index) may be claimed by a lab of a test running alongside.
    bridge = subprocess.run(["ip", "-o", "link", "show", f"cslab{int(index) - 200}"],
                            capture_output=True, text=True, check=True).stdout
    ifindex = bridge.split(":", 1)[0]
    down = subprocess.run([*LAB, "down", "--dir", str(lab_dir)], capture_output=True,
                          text=True)
    assert down.returncode == 0, down.stderr
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    lab_json_gone = not (lab_dir / "lab.json").exists()
    assert f"cs{tag}-" not in netns and f"c{tag}h" not in links
    assert not [ln for ln in links.splitlines() if ln.startswith(f"{ifindex}: ")]
    assert lab_json_gone and not (lab_dir / "hosts").exists()


def test_hosts_over_ssh_engine_and_users(lab_factory) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller", os="sles-15"),
                       HostSpec("wrk-1", "worker", user="alice", sudo=True),
                       HostSpec("wrk-2", "worker", user="bob", sudo=False, clock_offset=300)])
    assert ssh(lab, "ctl-1", "hostname")[1].strip() == "ctl-1"
    assert 'ID="sles"' in ssh(lab, "ctl-1", "cat /etc/os-release")[1]
    assert ssh(lab, "ctl-1", "rke2 --version")[1].splitlines()[0] == \
        "rke2 version v1.30.4+rke2r1 (6b4e1a7b)"
    assert ssh(lab, "ctl-1", "sv status /etc/service/rke2-server")[1].startswith("run:")
    assert ssh(lab, "wrk-1", "id -un", "alice")[1].strip() == "alice"
    assert ssh(lab, "wrk-1", "sv status /etc/service/rke2-agent", "alice")[0] != 0
    assert ssh(lab, "wrk-1", "sudo -n sv status /etc/service/rke2-agent", "alice")[1] \
        .startswith("run:")
    assert ssh(lab, "wrk-2", "sudo -n true", "bob")[0] != 0
    # The shell rc files of the machine are hidden: nothing slows down an SSH command.
    assert ssh(lab, "ctl-1", "ls -A /root")[1].split().count(".bashrc") == 0
    host_clock = float(ssh(lab, "wrk-2", "date +%s", "bob")[1])
    assert 290 < host_clock - time.time() < 310


def test_engine_refuses_invalid_registries_and_recovers(lab_factory) -> None:
    lab = lab_factory([HostSpec("wrk-1", "worker")])
    marker = Path(lab.host("wrk-1").dir) / "rancher-var" / "rke2" / "lab-engine.json"
    assert marker.exists()
    lab.exec("wrk-1", "printf 'mirrors: [unclosed\\n' > /etc/rancher/rke2/registries.yaml && "
                      "sv restart /etc/service/rke2-agent", check=False)
    poll(lambda: not marker.exists())
    # It keeps failing (a restart loop), like the real engine under systemd.
    engine_log = Path(lab.host("wrk-1").dir) / "var.upper" / "log" / "rke2-agent" / "current"
    poll(lambda: engine_log.exists() and "fatal" in engine_log.read_text())
    assert not marker.exists()
    lab.exec("wrk-1", "printf 'mirrors: {}\\n' > /etc/rancher/rke2/registries.yaml")
    poll(marker.exists)


def test_k3s_flavour_and_two_labs_at_once(lab_factory) -> None:
    one = lab_factory([HostSpec("ctl-1", "controller")], distro="k3s")
    two = lab_factory([HostSpec("ctl-1", "controller")])
    assert one.host("ctl-1").address != two.host("ctl-1").address
    assert ssh(one, "ctl-1", "k3s --version")[1].startswith("k3s version v1.30.4+k3s1 ")
    assert ssh(one, "ctl-1", "sv status /etc/service/k3s")[1].startswith("run:")
    assert ssh(two, "ctl-1", "rke2 --version")[1].startswith("rke2 version")


def test_engine_version_can_be_changed(lab_factory) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller", engine_version="v1.31.0+rke2r1")])
    assert "v1.31.0+rke2r1" in ssh(lab, "ctl-1", "rke2 --version")[1]
    lab.set_engine_version("ctl-1", "v1.29.9+rke2r2")
    assert "v1.29.9+rke2r2" in ssh(lab, "ctl-1", "rke2 --version")[1]


def test_a_restarted_sshd_is_the_new_one_once_restart_returns(lab_factory) -> None:
    """Rekeyed and restarted back to back, as the host-key tests do: the first connection
    after restart_sshd returns meets the new sshd, with the new key. `sv restart` alone
    returns early about a third of the time, and that connection met the old sshd or a
    closed port."""
    lab = lab_factory([HostSpec("ctl-1", "controller")])
    key = "/etc/ssh/lab_host_ed25519_key"
    address = lab.host("ctl-1").address
    for _ in range(8):
        lab.exec("ctl-1", f"rm -f {key} {key}.pub && ssh-keygen -q -t ed25519 -N '' -f {key}")
        lab.restart_sshd("ctl-1")
        with socket.create_connection((address, 22), timeout=5) as sock:
            transport = paramiko.Transport(sock)
            try:
                transport.start_client(timeout=5)
                presented = transport.get_remote_server_key().get_base64()
            finally:
                transport.close()
        assert presented == lab.exec("ctl-1", f"cut -d' ' -f2 {key}.pub").stdout.strip()


@pytest.mark.parametrize("count", [6, 30])
def test_startup_time_and_memory(tmp_path: Path, count: int) -> None:
    """Not a timed assertion: prints the figures (run with -s to see them)."""
    specs = [HostSpec(f"h-{i}", "worker" if i else "controller") for i in range(count)]
    started = time.monotonic()
    lab = Lab.up(tmp_path / "lab", specs)
    elapsed = time.monotonic() - started
    try:
        rss = 0
        for host in lab.hosts:
            pids = subprocess.run(["ip", "netns", "pids", host.netns], capture_output=True,
                                  text=True).stdout.split()
            for pid in pids:
                status = Path(f"/proc/{pid}/status")
                if status.exists():
                    for line in status.read_text().splitlines():
                        if line.startswith("VmRSS:"):
                            rss += int(line.split()[1])
        print(f"\nlab: {count} hosts up in {elapsed:.2f}s, {rss / count / 1024:.1f} MiB RSS "
              "per host")
        assert len(lab.hosts) == count
    finally:
        lab.down()
