"""Hosts behind one bastion share one connection to it (a direct-tcpip channel each); a
bastion that cannot be reached costs one attempt, whose error every host behind it gets.
ssh_config's ProxyJump hosts are shared alike; its ProxyCommand pipes the connection.

The bastion and the hosts are paramiko SSH servers in this process, on 127.0.0.1."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import paramiko
import pytest

from planner.config.model import Bastion, SshConfig
from planner.errors import CommandError, ConnectError, HostKeyError
from planner.hosts.pool import parallel
from planner.hosts.ssh import ConnectOptions, SshSession, open_session
from planner.hosts.ssh_config import SshConfigFiles


def _until(what: str, check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


class _Handler(paramiko.ServerInterface):
    def __init__(self, client_key: paramiko.PKey) -> None:
        self.client_key = client_key
        self.destinations: dict[int, tuple[str, int]] = {}

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        return paramiko.AUTH_SUCCESSFUL if key == self.client_key else paramiko.AUTH_FAILED

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return paramiko.OPEN_SUCCEEDED if kind == "session" else \
            paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_direct_tcpip_request(self, chanid: int, origin: tuple[str, int],
                                           destination: tuple[str, int]) -> int:
        self.destinations[chanid] = destination
        return paramiko.OPEN_SUCCEEDED

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        def answer() -> None:
            # After the client's EOF, which it sends once it has the exec's reply: an
            # answer before that reply closed the channel under exec_command.
            while channel.recv(65536):
                pass
            channel.sendall(b"ok\n")
            channel.send_exit_status(0)
            channel.close()
        threading.Thread(target=answer, daemon=True).start()
        return True


class SshServer:
    """Accepts the client key; runs any command as `echo ok`; forwards direct-tcpip."""

    def __init__(self, host_key: paramiko.PKey, client_key: paramiko.PKey) -> None:
        self.host_key = host_key
        self.client_key = client_key
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted = 0
        self.transports: list[paramiko.Transport] = []
        self._lock = threading.Lock()
        self._closed = False
        self._handshaking: paramiko.Transport | None = None
        self._serving = threading.Thread(target=self._serve, daemon=True)
        self._serving.start()

    def open_connections(self) -> int:
        return sum(t.is_active() for t in self.transports)

    def _serve(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return  # close() shut the listener down
            with self._lock:
                if self._closed:
                    sock.close()
                    return
                self.accepted += 1
                transport = self._handshaking = paramiko.Transport(sock)
            transport.add_server_key(self.host_key)
            handler = _Handler(self.client_key)
            try:
                transport.start_server(server=handler)
            except (paramiko.SSHException, OSError, EOFError):
                # A client that hangs up mid-handshake (a key it refused, a test done with
                # it): a real sshd drops that connection and goes on accepting.
                transport.close()
                continue
            finally:
                with self._lock:
                    self._handshaking = None
            self.transports.append(transport)
            threading.Thread(target=self._forward, args=(transport, handler),
                             daemon=True).start()

    def _forward(self, transport: paramiko.Transport, handler: _Handler) -> None:
        while transport.is_active():
            channel = transport.accept(0.2)
            if channel is None or channel.get_id() not in handler.destinations:
                continue
            target = socket.create_connection(handler.destinations[channel.get_id()])
            for src, dst in ((channel, target), (target, channel)):
                threading.Thread(target=_pump, args=(src, dst), daemon=True).start()

    def close(self) -> None:
        """Stop accepting, then let go of the listener: in that order.

        Cause of the "host key of bastion ... CHANGED" that test_a_bastion_that_dropped_
        its_connection_is_dialled_again met once: close() used to close the listener under
        a live _serve. On Linux that does not end an accept() already blocked on it: the
        socket stays bound and listening, and answers one more connection, with this
        server's key, after its test ended (test_a_closed_server_answers_with_its_key_no_
        more). And a _serve that has read the descriptor number but not yet entered
        accept() enters it after the number was reused, typically by the next test's
        first listener, its bastion: the old server then takes turns with the bastion's
        own thread in accept(), and a bastion dialled twice gets the old key on one dial.
        The window is narrow (a thread preempted between the two), hence "once"; no other
        way for a bastion's port to present another key was found, and a simulated late
        accept() gives exactly that message on the second dial.

        So: shutdown() ends the accept() (and makes any later one fail at once), a
        handshake in progress is cut, _serve is joined, and only then is the descriptor
        closed: no thread of a closed server accepts anything, on any port, again."""
        with self._lock:
            self._closed = True
            handshaking = self._handshaking
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if handshaking is not None:
            handshaking.close()
        self._serving.join(10)
        assert not self._serving.is_alive(), f"the server on port {self.port} still accepts"
        self.listener.close()
        for transport in self.transports:
            transport.close()


def _pump(src: paramiko.Channel | socket.socket, dst: paramiko.Channel | socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        # The session may be gone already (its transport closed first): nothing to close.
        with contextlib.suppress(OSError, EOFError):
            dst.close()


def _keygen(path: Path) -> paramiko.PKey:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return paramiko.PKey.from_path(path)


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Callable[[], SshServer]]:
    client_key = _keygen(tmp_path / "id_ed25519")
    made: list[SshServer] = []
    known = tmp_path / "known_hosts"
    known.touch()

    def make() -> SshServer:
        server = SshServer(_keygen(tmp_path / f"host_{len(made)}"), client_key)
        made.append(server)
        with known.open("a") as fh:
            fh.write(f"[127.0.0.1]:{server.port} {server.host_key.get_name()} "
                     f"{server.host_key.get_base64()}\n")
        return server

    yield make
    for server in made:
        server.close()


def _behind(tmp_path: Path, host: SshServer, bastion_port: int) -> SshConfig:
    key = tmp_path / "id_ed25519"
    return SshConfig("127.0.0.1", host.port, "root", key, tmp_path / "known_hosts",
                     Bastion("127.0.0.1", bastion_port, None, key))


def test_hosts_behind_a_bastion_share_one_connection_closed_with_them(
        servers: Callable[[], SshServer], tmp_path: Path) -> None:
    bastion = servers()
    hosts = [servers() for _ in range(12)]
    options = ConnectOptions(connect_timeout=5)
    sessions = parallel(hosts, lambda h: open_session(
        f"h{h.port}", _behind(tmp_path, h, bastion.port), options), 12)
    assert not [s for s in sessions if isinstance(s, Exception)], sessions
    opened = [s for s in sessions if not isinstance(s, Exception)]
    assert [s.run("true", 5).stdout for s in opened] == [b"ok\n"] * 12
    assert bastion.accepted == 1
    assert all(h.accepted == 1 for h in hosts)
    for session in opened:
        session.close()
    assert bastion.open_connections() == 1  # the hosts' channels closed, not the bastion
    options.gateways.close()
    _until("the bastion connection to close", lambda: bastion.open_connections() == 0)


def test_a_dead_bastion_is_tried_once_and_fails_every_host_behind_it(
        servers: Callable[[], SshServer], tmp_path: Path) -> None:
    # Accepts, then hangs up before the SSH banner, as sshd over its MaxStartups does.
    dead = socket.create_server(("127.0.0.1", 0))
    port = dead.getsockname()[1]
    attempts: list[socket.socket] = []

    def hang_up() -> None:
        while True:
            try:
                sock, _ = dead.accept()
            except OSError:
                return
            attempts.append(sock)
            sock.close()

    hanging_up = threading.Thread(target=hang_up, daemon=True)
    hanging_up.start()
    hosts = [servers() for _ in range(8)]
    options = ConnectOptions(connect_timeout=5)
    try:
        results = parallel(hosts, lambda h: open_session(
            f"h{h.port}", _behind(tmp_path, h, port), options), 8)
        # A host asking later gets the same answer, without another attempt.
        results.append(_error(lambda: open_session(
            "late", _behind(tmp_path, hosts[0], port), options)))
    finally:
        # As SshServer.close: end the accept() before the descriptor is let go.
        dead.shutdown(socket.SHUT_RDWR)
        hanging_up.join(10)
        dead.close()
    assert len(attempts) == 1
    assert all(isinstance(r, ConnectError) for r in results), results
    messages = {r.message for r in results if isinstance(r, ConnectError)}
    assert len(messages) == 1
    message = messages.pop()
    assert message.startswith(f"cannot connect to bastion 127.0.0.1:{port}: "), message
    assert "\n" not in message
    assert all(h.accepted == 0 for h in hosts)
    assert [str(r).split(":", 1)[0] for r in results] == \
        [f"h{h.port}" for h in hosts] + ["late"]


def test_a_closed_server_answers_with_its_key_no_more(
        servers: Callable[[], SshServer]) -> None:
    """What SshServer.close guarantees: once closed, nothing of it accepts a connection;
    its port refuses (or, taken again by another process since, is not this server)."""
    server = servers()
    server.close()
    try:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    except ConnectionRefusedError:
        return
    transport = paramiko.Transport(sock)
    try:
        transport.start_client(timeout=5)
        assert transport.get_remote_server_key() != server.host_key
    except (paramiko.SSHException, EOFError):
        pass  # not an SSH server at all
    finally:
        transport.close()


def _lost(session: SshSession) -> bool:
    try:
        session.run("true", 1)
    except CommandError:
        return True
    return False


def _error(fn: Callable[[], object]) -> Exception:
    try:
        fn()
    except Exception as exc:
        return exc
    raise AssertionError("no error")


def test_a_bastion_that_dropped_its_connection_is_dialled_again(
        servers: Callable[[], SshServer], tmp_path: Path) -> None:
    # An executor reconnecting after a bastion's sshd restart must not be handed the
    # dead connection, nor the error of a bastion that never answered.
    bastion, host = servers(), servers()
    options = ConnectOptions(connect_timeout=5)
    first = open_session("h", _behind(tmp_path, host, bastion.port), options)
    for transport in bastion.transports:
        transport.close()
    _until("the host's connection to drop with the bastion's", lambda: _lost(first))
    again = open_session("h", _behind(tmp_path, host, bastion.port), options)
    assert again.run("true", 5).stdout == b"ok\n"
    assert bastion.accepted == 2
    again.close()
    first.close()
    options.gateways.close()


def _via_ssh_config(tmp_path: Path, text: str) -> ConnectOptions:
    path = tmp_path / "ssh_config"
    path.write_text(text)
    return ConnectOptions(connect_timeout=5, ssh_config=SshConfigFiles((path,)))


def test_proxyjump_from_ssh_config_one_connection_to_the_jump_host(
        servers: Callable[[], SshServer], tmp_path: Path) -> None:
    jump = servers()
    hosts = [servers() for _ in range(4)]
    key = tmp_path / "id_ed25519"
    # The jump host's credentials come from ssh_config, the hosts' from cluster.yaml.
    options = _via_ssh_config(tmp_path, "".join(
        f"Host host-{i}\n    HostName 127.0.0.1\n    Port {h.port}\n"
        f"    ProxyJump jumper@127.0.0.1:{jump.port}\n" for i, h in enumerate(hosts))
        + f"Host 127.0.0.1\n    IdentityFile {key}\n")
    sessions = parallel(list(enumerate(hosts)), lambda ih: open_session(
        f"h{ih[0]}", SshConfig(f"host-{ih[0]}", None, "root", key, tmp_path / "known_hosts"),
        options), 4)
    assert not [s for s in sessions if isinstance(s, Exception)], sessions
    opened = [s for s in sessions if isinstance(s, SshSession)]
    assert [s.run("true", 5).stdout for s in opened] == [b"ok\n"] * 4
    assert [s.endpoint for s in opened] == [f"127.0.0.1:{h.port}" for h in hosts]
    assert jump.accepted == 1 and all(h.accepted == 1 for h in hosts)
    for session in opened:
        session.close()
    options.gateways.close()
    _until("the jump host connection to close", lambda: jump.open_connections() == 0)


def test_a_jump_host_with_an_unknown_key_is_refused(
        servers: Callable[[], SshServer], tmp_path: Path) -> None:
    host = servers()
    stranger = SshServer(_keygen(tmp_path / "stranger"), host.client_key)
    key = tmp_path / "id_ed25519"
    options = _via_ssh_config(tmp_path, f"Host target\n    HostName 127.0.0.1\n"
                                        f"    Port {host.port}\n"
                                        f"    ProxyJump 127.0.0.1:{stranger.port}\n")
    try:
        error = _error(lambda: open_session(
            "h", SshConfig("target", None, "root", key, tmp_path / "known_hosts"), options))
    finally:
        stranger.close()
    assert isinstance(error, HostKeyError), error
    assert f"of jump host 127.0.0.1:{stranger.port} is not in" in error.message
    assert host.accepted == 0


RELAY = """\
import socket, sys, threading
sock = socket.create_connection((sys.argv[1], int(sys.argv[2])))
def up():
    while data := sys.stdin.buffer.read1(65536):
        sock.sendall(data)
    sock.shutdown(socket.SHUT_WR)
threading.Thread(target=up, daemon=True).start()
while data := sock.recv(65536):
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
"""


def test_proxycommand_from_ssh_config(servers: Callable[[], SshServer], tmp_path: Path) -> None:
    host = servers()
    (tmp_path / "relay.py").write_text(RELAY)
    options = _via_ssh_config(tmp_path, f"Host piped\n    HostName 127.0.0.1\n"
                                        f"    Port {host.port}\n"
                                        f"    ProxyCommand {sys.executable} "
                                        f"{tmp_path / 'relay.py'} %h %p\n")
    ssh = SshConfig("piped", None, "root", tmp_path / "id_ed25519", tmp_path / "known_hosts")
    session = open_session("h", ssh, options)
    assert session.run("true", 5).stdout == b"ok\n"
    session.close()
    assert host.accepted == 1
