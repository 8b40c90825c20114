"""A host that accepts the TCP connection and then stalls the SSH handshake is named by the
stage it stalled at (no banner, banner but no key exchange, key exchange but no answer to
authentication), direct, behind a bastion and through a ProxyCommand, within the connect
timeout; a TCP connect timeout and a refused connection keep their words.

The stalling servers are tests/stalling_listener.py's, in this process, on 127.0.0.1."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import paramiko
import pytest

from planner.config.model import Bastion, SshConfig
from planner.errors import ConnectError
from planner.hosts.ssh import ConnectOptions, open_session
from planner.hosts.ssh_config import SshConfigFiles
from planner.hosts.stalls import HandshakeWatch
from tests.stalling_listener import BANNER, StallingListener
from tests.unit.test_dial import silent_listener
from tests.unit.test_gateways import RELAY, SshServer, _keygen

TIMEOUT = 0.5
RELAY_TIMEOUT = 3.0  # a deadline that must also cover a Python relay's start
NO_BANNER = (f"connected, but the SSH server sent no banner within {TIMEOUT:g}s (an "
             "overloaded or hung sshd, a tarpit, or not an SSH server on that port; "
             "options.ssh.connectTimeoutSeconds)")
NO_KEX = (f"connected and the SSH server sent its banner, but the key exchange did not "
          f"finish within {TIMEOUT:g}s (an overloaded or hung sshd; "
          "options.ssh.connectTimeoutSeconds)")
NO_AUTH = (f"connected and the key exchange finished, but authentication did not finish "
           f"within {TIMEOUT:g}s (sshd waiting on PAM, LDAP or DNS, or overloaded; "
           "options.ssh.connectTimeoutSeconds)")
STAGES = {"silent": NO_BANNER, "banner": NO_KEX, "auth": NO_AUTH}


class Keys:
    """The client's key, a host key for the servers, and the known_hosts they go in."""

    def __init__(self, tmp_path: Path) -> None:
        self.client = tmp_path / "id_ed25519"
        self.client_key = _keygen(self.client)
        self.host_key = _keygen(tmp_path / "host_key")
        self.known_hosts = tmp_path / "known_hosts"
        self.known_hosts.touch()

    def trust(self, port: int, key: paramiko.PKey | None = None) -> None:
        key = key or self.host_key
        with self.known_hosts.open("a") as fh:
            fh.write(f"[127.0.0.1]:{port} {key.get_name()} {key.get_base64()}\n")

    def ssh(self, port: int, bastion: int | None = None) -> SshConfig:
        return SshConfig("127.0.0.1", port, "root", self.client, self.known_hosts,
                         Bastion("127.0.0.1", bastion, None, self.client)
                         if bastion is not None else None)


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    return Keys(tmp_path)


@pytest.fixture
def listen(keys: Keys) -> Iterator[Callable[[str], StallingListener]]:
    made: list[StallingListener] = []

    def make(mode: str) -> StallingListener:
        listener = StallingListener(mode, host_key=keys.host_key if mode == "auth" else None)
        keys.trust(listener.port)
        made.append(listener)
        return listener

    yield make
    for listener in made:
        listener.close()


@pytest.fixture
def options() -> Iterator[ConnectOptions]:
    made = ConnectOptions(connect_timeout=TIMEOUT)
    yield made
    made.close()


def _failure(connect: Callable[[], object]) -> tuple[str, float]:
    started = time.monotonic()
    with pytest.raises(ConnectError) as failed:
        connect()
    return str(failed.value), time.monotonic() - started


@pytest.mark.parametrize("mode", sorted(STAGES))
def test_the_stage_the_host_stalled_at_is_named(mode: str, keys: Keys, listen,  # type: ignore[no-untyped-def]
                                                options: ConnectOptions) -> None:
    listener = listen(mode)
    message, elapsed = _failure(lambda: open_session("h", keys.ssh(listener.port), options))
    assert message == f"h: 127.0.0.1:{listener.port}: {STAGES[mode]}"
    # One deadline for the whole handshake, authentication included.
    assert TIMEOUT <= elapsed < TIMEOUT + 2, elapsed


def test_behind_a_bastion_the_stalled_one_is_named(keys: Keys, listen,  # type: ignore[no-untyped-def]
                                                  options: ConnectOptions) -> None:
    bastion = SshServer(keys.host_key, keys.client_key)
    keys.trust(bastion.port)
    try:
        host = listen("banner")
        message, _ = _failure(lambda: open_session("h", keys.ssh(host.port, bastion.port),
                                                   options))
        assert message == f"h: 127.0.0.1:{host.port}: {NO_KEX}"
        silent = listen("silent")  # the bastion itself stalls: hosts behind it say so
        message, _ = _failure(lambda: open_session("h", keys.ssh(host.port, silent.port),
                                                   options))
        assert message == f"h: bastion 127.0.0.1:{silent.port}: {NO_BANNER}"
    finally:
        bastion.close()


def test_through_a_proxycommand_no_banner_is_the_commands_stall(
        keys: Keys, listen, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # A pipe says nothing of whether the command connected: no banner is not "connected,
    # but...". A banner that came through it is, as ever, the server's.
    host = listen("banner")
    (tmp_path / "relay.py").write_text(RELAY)
    config = tmp_path / "ssh_config"
    config.write_text(f"Host relayed\n    HostName 127.0.0.1\n    Port {host.port}\n"
                      f"    ProxyCommand {sys.executable} {tmp_path / 'relay.py'} %h %p\n"
                      "Host stuck\n    ProxyCommand sleep 30\n")
    # The deadline counts from the command's start, and the relay is a Python interpreter
    # that must start and connect before any banner can come through: under CI load that
    # took over 0.5 s once. The relayed case gets a deadline that covers its start-up.
    for name, timeout, expected in (
            ("stuck", TIMEOUT, f"no SSH banner came through its ProxyCommand within "
                               f"{TIMEOUT:g}s (the command did not get through, an overloaded "
                               "or hung sshd, or not an SSH server on that port; "
                               "options.ssh.connectTimeoutSeconds)"),
            ("relayed", RELAY_TIMEOUT, NO_KEX.replace(f"within {TIMEOUT:g}s",
                                                      f"within {RELAY_TIMEOUT:g}s"))):
        options = ConnectOptions(connect_timeout=timeout,
                                 ssh_config=SshConfigFiles((config,)))
        ssh = SshConfig(name, None, "root", keys.client, keys.known_hosts)
        assert _failure(lambda: open_session("h", ssh, options))[0] == \
            f"h: {name}:22: {expected}"  # noqa: B023 - called at once


def test_connect_timeout_refused_and_refused_keys_keep_their_words(
        keys: Keys, options: ConnectOptions) -> None:
    full, fillers = silent_listener()  # the TCP connection itself never completes
    closed = socket.create_server(("127.0.0.1", 0))
    refused = closed.getsockname()[1]
    closed.close()
    stranger = SshServer(keys.host_key, _keygen(keys.client.with_name("other")))
    keys.trust(stranger.port)
    try:
        port = full.getsockname()[1]
        timed_out = (f"h: cannot connect to 127.0.0.1:{port}: timed out after "
                     f"{TIMEOUT:g}s (host down, or a firewall dropping port 22's packets; "
                     "options.ssh.connectTimeoutSeconds)")
        assert _failure(lambda: open_session("h", keys.ssh(port), options))[0] == timed_out
        assert _failure(lambda: open_session("h", keys.ssh(refused), options))[0] == (
            f"h: cannot connect to 127.0.0.1:{refused}: connection refused (the host "
            "is up but nothing listens on that port: sshd down?)")
        # A key refused at once is a refusal, not a stall.
        message, _ = _failure(lambda: open_session("h", keys.ssh(stranger.port),
                                                  options))
        assert "authentication failed for root@127.0.0.1" in message, message
    finally:
        for s in [full, *fillers]:
            s.close()
        stranger.close()


@pytest.fixture
def tcp_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected client and server over TCP on 127.0.0.1 (TCP_INFO needs TCP)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    yield client, server
    client.close()
    server.close()


def _arrived(sock: socket.socket, size: int) -> None:
    """Poll until `size` bytes wait unread on `sock`."""
    deadline = time.monotonic() + 5
    while True:
        try:
            if len(sock.recv(4096, socket.MSG_PEEK | socket.MSG_DONTWAIT)) >= size:
                return
        except BlockingIOError:
            pass
        assert time.monotonic() < deadline, f"{size} bytes never arrived"
        time.sleep(0.01)


def test_the_watch_tells_the_stage_from_what_came(tcp_pair) -> None:  # type: ignore[no-untyped-def]
    client, server = tcp_pair
    watch = HandshakeWatch()
    assert watch.stage(client) == "banner"  # nothing yet
    server.sendall(b"a line before the banner\r\n")
    _arrived(client, 26)
    assert watch.stage(client) == "banner"  # something, not a banner
    client.recv(26)  # as libssh2 skips it
    server.sendall(BANNER)
    _arrived(client, len(BANNER))
    assert watch.stage(client) == "kex"
    watch.kex_done = True
    assert watch.stage(client) == "auth"


def test_a_banner_libssh2_read_before_any_peek_still_counts(tcp_pair) -> None:  # type: ignore[no-untyped-def]
    # The banner landed between a peek and libssh2's read of it: the kernel's count of
    # bytes received says it came.
    client, server = tcp_pair
    server.sendall(BANNER)
    _arrived(client, len(BANNER))
    client.recv(len(BANNER))
    assert HandshakeWatch().stage(client) == "kex"
