"""Atomic writes with backups on real lab hosts (executor/file_writes.py)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from executor.file_writes import restore_file, write_file
from executor.remote import HostWriter
from planner.config.model import SshConfig
from planner.errors import CommandError, CommandTimeout
from planner.hosts.ssh import ConnectOptions, open_session
from tests.e2e.uploads import Upload
from tests.lab import HostSpec, Lab
from tests.reliability.faults import cut_inbound, restore_traffic

REGISTRIES = "/etc/rancher/rke2/registries.yaml"
PLAN = "0123456789abcdef0123456789abcdef"


def writer(lab: Lab, name: str) -> HostWriter:
    host = lab.host(name)
    ssh = SshConfig(address=host.address, user=host.user, key_path=lab.dir / "id_ed25519",
                    known_hosts=lab.dir / "known_hosts")
    session = open_session(name, ssh, ConnectOptions())
    return HostWriter(session, session.user, 30)


def stat(lab: Lab, name: str, path: str) -> str:
    return lab.exec(name, f"stat -c '%a %U:%G' {path}").stdout.strip()


@pytest.mark.parametrize("user", ["root", "alice"])
def test_write_keeps_a_backup_sets_mode_and_leaves_no_temp(lab_factory, user: str) -> None:
    lab = lab_factory([HostSpec("wrk-1", "worker", user=user)])
    before = lab.exec("wrk-1", f"cat {REGISTRIES}").stdout
    lab.exec("wrk-1", f"chmod 644 {REGISTRIES}")
    host = writer(lab, "wrk-1")
    secret = b"mirrors: {}\nconfigs: {r.io: {auth: {password: pw-7c1d}}}\n"
    written = write_file(host, REGISTRIES, secret, mode=0o600, plan_id=PLAN)
    assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout.encode() == secret
    assert stat(lab, "wrk-1", REGISTRIES) == "600 root:root"  # credentials: 0600
    assert written.backup == f"/var/lib/cargoship/backups/{PLAN}{REGISTRIES}"
    assert lab.exec("wrk-1", f"cat {written.backup}").stdout == before
    assert lab.exec("wrk-1", "ls -A /etc/rancher/rke2").stdout.split() == [
        "config.yaml", "registries.yaml"]  # no temp file left behind
    # Restore brings back the old content exactly.
    restore_file(host, written)
    assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == before
    host.close()


def test_new_file_without_previous_content(lab_factory) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller")])
    host = writer(lab, "ctl-1")
    path = "/etc/rancher/rke2/config.yaml.d/50-cargoship.yaml"
    written = write_file(host, path, b"audit-policy-file: /x\n", mode=0o600, plan_id=PLAN)
    assert written.backup is None
    assert stat(lab, "ctl-1", path) == "600 root:root"
    restore_file(host, written)
    assert lab.exec("ctl-1", f"test -e {path}", check=False).returncode == 1
    host.close()


def test_failed_write_leaves_the_old_file_whole(lab_factory) -> None:
    lab = lab_factory([HostSpec("wrk-1", "worker")])
    before = lab.exec("wrk-1", f"cat {REGISTRIES}").stdout
    # A read-only /etc/rancher: the temp file can't even be created.
    lab.exec("wrk-1", "mount -o remount,bind,ro /etc/rancher")
    host = writer(lab, "wrk-1")
    with pytest.raises(CommandError, match="remote command failed"):
        write_file(host, REGISTRIES, b"mirrors: {}\n", mode=0o600, plan_id=PLAN)
    lab.exec("wrk-1", "mount -o remount,bind,rw /etc/rancher")
    assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == before
    assert ".cargoship." not in lab.exec("wrk-1", "ls -A /etc/rancher/rke2").stdout
    host.close()


def test_paths_with_shell_metacharacters_are_quoted(lab_factory, tmp_path: Path) -> None:
    lab = lab_factory([HostSpec("wrk-1", "worker")])
    host = writer(lab, "wrk-1")
    path = "/etc/rancher/rke2/x; touch /tmp/pwned $(touch /tmp/pwned2).yaml"
    write_file(host, path, b"a: 1\n", mode=0o600, plan_id=PLAN)
    assert lab.exec("wrk-1", "ls /tmp").stdout.split() == []
    assert lab.exec("wrk-1", ["cat", path]).stdout == "a: 1\n"
    host.close()


@pytest.mark.parametrize("existed", [True, False])
def test_a_write_run_again_keeps_the_first_backup(lab_factory, existed: bool) -> None:
    """After a reconnection the executor runs a write again; the second run must not back up
    what the first one wrote, or a restore would bring back the new content."""
    lab = lab_factory([HostSpec("wrk-1", "worker")])
    path = REGISTRIES if existed else "/etc/rancher/rke2/new.yaml"
    before = lab.exec("wrk-1", f"cat {path}", check=False).stdout if existed else None
    host = writer(lab, "wrk-1")
    first = write_file(host, path, b"mirrors: {a: {}}\n", mode=0o600, plan_id=PLAN)
    again = write_file(host, path, b"mirrors: {a: {}}\n", mode=0o600, plan_id=PLAN)
    assert again == first
    restore_file(host, again)
    after = lab.exec("wrk-1", f"cat {path}", check=False)
    assert (after.stdout if after.returncode == 0 else None) == before


def test_a_command_that_exits_before_reading_its_input_is_not_a_lost_connection(
        lab_factory) -> None:
    """A lock found held, a refusal: the remote command ends without reading stdin, and
    sshd closes the channel while data is still being sent. That is the command's exit,
    not a dropped connection (seen as a flaky lock race under load)."""
    lab = lab_factory([HostSpec("wrk-1", "worker")])
    host = writer(lab, "wrk-1")
    for _ in range(5):
        result = host.run_root("echo refused; exit 3", stdin=b"x" * 8_000_000, check=False)
        assert (result.exit_code, result.stdout) == (3, b"refused\n")
    assert host.run_root("echo still here").stdout == b"still here\n"  # the same session
    host.close()


def test_a_command_that_ends_while_a_packet_is_half_sent_leaves_the_session_usable(
        lab_factory) -> None:
    """The same, with the socket's send buffer a few kilobytes: the command's end now comes
    while one of our data packets is half on the wire. libssh2 sends nothing else on the
    connection (not the EOF, not another command) until that same write finishes it, so
    giving up the write there wedged the session for good: the EOF was tried forever (seen
    as an 18-minute hang of the test above under load)."""
    lab = lab_factory([HostSpec("wrk-1", "worker")])
    host = writer(lab, "wrk-1")
    host._writer_session._wire.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    for _ in range(10):
        result = host.run_root("echo refused; exit 3", stdin=b"x" * 2_000_000, check=False,
                               timeout=10)
        assert (result.exit_code, result.stdout) == (3, b"refused\n")
    assert host.run_root("echo still here", timeout=10).stdout == b"still here\n"
    host.close()


def test_a_command_timed_out_mid_packet_leaves_the_session_usable(lab_factory) -> None:
    """A command that runs out of time while one of its stdin's packets is half on the wire
    (the host dropped off the network mid-upload): its packet, then its channel's close,
    are finished once the host is back, and the session goes on. Given up there, they left
    the session wedged for every later command (the same would cut off every host behind a
    shared bastion, tests/e2e/test_bastion_sessions.py)."""
    lab = lab_factory([HostSpec("wrk-1", "worker")])
    host = lab.host("wrk-1")
    session = open_session("wrk-1", SshConfig(
        address=host.address, user=host.user, key_path=lab.dir / "id_ed25519",
        known_hosts=lab.dir / "known_hosts"), ConnectOptions())
    session._wire.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    upload = Upload(lab, "wrk-1", session, 200_000_000, 4)
    # Our data stops reaching the host, so our socket fills and the next packet goes out
    # half. The host's own packets still come: cut both ways, a loaded host whose `cat`
    # had fallen behind left the channel's window shut at the cut (sshd holds up to its
    # window and adjusts it only as cat drains it, OpenSSH channels.c
    # channel_check_window), libssh2 had no packet to begin, and the command timed out
    # with none half sent. One way, sshd's window adjusts still reach us.
    cut_inbound(lab, "wrk-1")
    try:
        outcome = upload.outcome(30)
        assert isinstance(outcome, CommandTimeout), outcome
        assert session._wire.half_sent()  # what the test is about: still on the wire
    finally:
        restore_traffic(lab, "wrk-1")
    assert session.run("echo still here", 20).stdout == b"still here\n"
    session.close()
