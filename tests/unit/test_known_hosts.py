"""The host layer reads known_hosts once per file version and trusts, per connection, only
the keys recorded for that host's name (plain, [host]:port and hashed entries)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import paramiko

from planner.hosts.host_keys import KnownHostsFiles, known_hosts_name


def _key(tmp_path: Path, name: str) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / name)],
                   check=True)
    return " ".join((tmp_path / f"{name}.pub").read_text().split()[:2])


def test_only_the_hosts_own_keys_are_trusted(tmp_path: Path) -> None:
    a, b, c = _key(tmp_path, "a"), _key(tmp_path, "b"), _key(tmp_path, "c")
    known = tmp_path / "known_hosts"
    known.write_text(f"10.0.0.1 {a}\n[127.0.0.1]:2201 {b}\n10.0.0.3 {c}\n")
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(known)], check=True,
                   capture_output=True)  # hashed names, as HashKnownHosts writes them
    files = KnownHostsFiles()
    for host, port, expected in (("10.0.0.1", 22, a), ("127.0.0.1", 2201, b),
                                 ("10.0.0.3", 22, c)):
        client = paramiko.SSHClient()
        files.trust(client, known, host, port)
        keys = client.get_host_keys()
        name = known_hosts_name(host, port)
        assert [f"{k.get_name()} {k.get_base64()}" for k in keys[name].values()] == [expected]
        assert len(keys) == 1
    client = paramiko.SSHClient()
    files.trust(client, known, "10.0.0.9", 22)
    assert len(client.get_host_keys()) == 0


def test_a_changed_file_is_read_again(tmp_path: Path) -> None:
    a, b = _key(tmp_path, "a"), _key(tmp_path, "b")
    known = tmp_path / "known_hosts"
    known.write_text(f"10.0.0.1 {a}\n")
    files = KnownHostsFiles()
    assert files.parsed(known).lookup("10.0.0.2") is None
    known.write_text(f"10.0.0.1 {a}\n10.0.0.2 {b}\n")  # another size: another version
    assert files.parsed(known).lookup("10.0.0.2") is not None
