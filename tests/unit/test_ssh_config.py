"""~/.ssh/config resolution: HostName, User, Port, IdentityFile, ProxyJump and ProxyCommand
as fabric resolved them (cluster.yaml's user and port win), from real ssh_config text."""

from __future__ import annotations

from pathlib import Path

import paramiko
import pytest

from planner.hosts.ssh_config import Hop, SshConfigFiles, Target, local_user

USER_FILE = """\
# the user's aliases
Host prod-ctl-1
    HostName 10.0.0.11
    User alice
    Port 2222
    IdentityFile ~/.ssh/prod_ed25519
    IdentityFile /keys/fallback

Host behind-*
    ProxyJump ops@jump.example.com:2200,bob@[fd00::1]:22

Host jump.example.com
    HostName 192.0.2.7
    User jumper

Host via-pipe
    HostName 10.0.0.30
    ProxyCommand /usr/bin/connect-proxy %h %p

Host *.internal
    ProxyJump gw.internal

Host *
    User everyone
    IdentityFile ~/.ssh/id_default
"""

SYSTEM_FILE = """\
Host *
    User from-system
    Port 2022
"""


@pytest.fixture
def files(tmp_path: Path) -> SshConfigFiles:
    (tmp_path / "config").write_text(USER_FILE)
    (tmp_path / "ssh_config").write_text(SYSTEM_FILE)
    return SshConfigFiles((tmp_path / "config", tmp_path / "ssh_config"))


def test_an_alias_resolves_to_its_hostname_user_port_and_keys(files: SshConfigFiles) -> None:
    home = str(Path("~").expanduser())
    assert files.resolve("prod-ctl-1") == Target(
        host="10.0.0.11", port=2222, user="alice",
        identity_files=(f"{home}/.ssh/prod_ed25519", "/keys/fallback",
                        f"{home}/.ssh/id_default"))


def test_values_from_cluster_yaml_win(files: SshConfigFiles) -> None:
    target = files.resolve("prod-ctl-1", 22, "root", ("/lab/id_ed25519",))
    assert (target.host, target.port, target.user) == ("10.0.0.11", 22, "root")
    # The explicit key is tried first, ssh_config's after it.
    assert target.identity_files[0] == "/lab/id_ed25519"
    assert len(target.identity_files) == 4


def test_first_value_wins_and_the_users_file_before_the_systems(files: SshConfigFiles) -> None:
    target = files.resolve("10.9.9.9")
    assert (target.host, target.user, target.port) == ("10.9.9.9", "everyone", 2022)
    assert target.direct and target.endpoint == "10.9.9.9:2022"


def test_proxyjump_hops_in_order(files: SshConfigFiles) -> None:
    target = files.resolve("behind-db")
    assert target.proxy_jump == (Hop("jump.example.com", "ops", 2200), Hop("fd00::1", "bob", 22))
    assert not target.direct and target.proxy_command is None
    # A hop is resolved like any host: its alias, user and port from the files.
    first = files.resolve_hop(target.proxy_jump[0])
    assert (first.host, first.port, first.user) == ("192.0.2.7", 2200, "ops")
    assert files.resolve_hop(Hop("jump.example.com")).user == "jumper"


def test_a_jump_host_is_not_reached_through_itself(files: SshConfigFiles) -> None:
    assert files.resolve("db.internal").proxy_jump == (Hop("gw.internal"),)
    gateway = files.resolve("gw.internal")
    assert gateway.proxy_jump == () and gateway.direct


def test_proxycommand_is_expanded(files: SshConfigFiles) -> None:
    target = files.resolve("via-pipe")
    assert target.proxy_command == "/usr/bin/connect-proxy 10.0.0.30 2022"
    assert not target.direct


def test_hop_syntax() -> None:
    assert Hop.parse("host") == Hop("host")
    assert Hop.parse("u@host:2") == Hop("host", "u", 2)
    assert Hop.parse("ssh://u@host:2") == Hop("host", "u", 2)
    assert Hop.parse("u@[::1]:2200") == Hop("::1", "u", 2200)
    assert Hop.parse("fe80::1") == Hop("fe80::1")


@pytest.mark.parametrize("port", ["abc", "\u00b2", "70000", "0", "9" * 5000])
def test_a_port_that_is_no_port_says_where_it_came_from(tmp_path: Path, port: str) -> None:
    (tmp_path / "config").write_text(f"Host a\n    Port {port}\n")
    files = SshConfigFiles((tmp_path / "config",))
    with pytest.raises(ValueError, match=r"^ssh_config: Port of a: '.*' is not a port "
                                         r"\(1-65535\)$"):
        files.resolve("a")
    with pytest.raises(ValueError, match=r"^ssh_config: ProxyJump 'u@host:.*' is not a port"):
        Hop.parse(f"u@host:{port}")


def test_no_files_means_openssh_defaults(tmp_path: Path) -> None:
    files = SshConfigFiles((tmp_path / "missing",))
    assert files.resolve("10.0.0.1") == Target("10.0.0.1", 22, local_user())


def test_files_are_parsed_once_per_run(files: SshConfigFiles, tmp_path: Path) -> None:
    assert files.resolve("prod-ctl-1").user == "alice"
    (tmp_path / "config").write_text("Host *\n    User changed\n")
    assert files.resolve("prod-ctl-1").user == "alice"
    assert files.resolve("another").user == "everyone"  # the same parse


def test_a_broken_file_fails_every_lookup_with_one_message(tmp_path: Path) -> None:
    (tmp_path / "config").write_text("Host a\n    =broken\n")
    files = SshConfigFiles((tmp_path / "config",))
    messages = set()
    for name in ("a", "b"):
        with pytest.raises(paramiko.SSHException) as raised:
            files.resolve(name)
        messages.add(str(raised.value))
    assert len(messages) == 1
    assert messages.pop().startswith(f"cannot read {tmp_path / 'config'}: ")


DEBIAN_STOCK = """\
Include /etc/ssh/ssh_config.d/*.conf
Host *
#   ForwardAgent no
    SendEnv LANG LC_*
    HashKnownHosts yes
    GSSAPIAuthentication yes
"""


@pytest.mark.parametrize("name", ["10.0.0.1", "ctl-1.lab", "fd00::1"])
def test_a_file_setting_nothing_read_resolves_as_paramiko_does_without_it(
        tmp_path: Path, name: str) -> None:
    """Debian's stock ssh_config sets nothing a connection reads: every name resolves to
    the defaults, as paramiko's lookup would resolve it, without paramiko being asked."""
    (tmp_path / "ssh_config").write_text(DEBIAN_STOCK)
    files = SshConfigFiles((tmp_path / "missing", tmp_path / "ssh_config"))
    resolved = files.resolve(name, user="root")
    assert files._parsed is None  # paramiko never parsed it
    theirs = paramiko.SSHConfig.from_text(DEBIAN_STOCK).lookup(name)
    assert resolved == Target(theirs["hostname"], int(theirs.get("port", 22)), "root",
                              tuple(theirs.get("identityfile", [])))


@pytest.mark.parametrize("line", ["HostName 10.9.9.9", "port=2201", "USER bob",
                                  "IdentityFile ~/.ssh/x", "ProxyJump gw",
                                  "ProxyCommand nc %h %p", "Match host x",
                                  "CanonicalizeHostname yes"])
def test_a_file_setting_what_is_read_goes_to_paramiko(tmp_path: Path, line: str) -> None:
    (tmp_path / "ssh_config").write_text(DEBIAN_STOCK + f"Host other\n    {line}\n")
    files = SshConfigFiles((tmp_path / "ssh_config",))
    assert files.resolve("10.0.0.1").host == "10.0.0.1"
    assert files._parsed is not None
