"""The run's connections to gateways: bastions (cluster.yaml) and ProxyJump hosts
(~/.ssh/config), one connection each for every host behind it, each host a direct-tcpip
channel over it; and ProxyCommand pipes.

A connection per host made a bastion take as many unauthenticated connections at once as
hosts connect at once, and OpenSSH's default MaxStartups (10:30:100) drops most of them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from pathlib import Path

import paramiko

from ..config.model import SshConfig
from ..errors import ConnectError, HostError
from .handshake import DialSettings, Peer, Sock, connect_failure, handshake
from .host_keys import DEFAULT_KNOWN_HOSTS, StrictPolicy
from .ssh_config import Hop, Target


class _Gateway:
    """One gateway's connection, opened once for every host behind it."""

    def __init__(self, endpoint: str, opener: Callable[[DialSettings], paramiko.SSHClient],
                 ) -> None:
        self.endpoint = endpoint
        self._open = opener
        self._lock = threading.Lock()
        self._client: paramiko.SSHClient | None = None
        self._failure: HostError | None = None
        self._connected_once = False
        self._attempts = 0

    def transport(self, label: str, options: DialSettings) -> paramiko.Transport:
        attempts = self._attempts
        with self._lock:
            transport = self._client.get_transport() if self._client is not None else None
            if transport is not None and transport.is_active():
                return transport
            # A gateway that never answered is dead for this run: every host behind it
            # gets that one attempt's error, not an attempt (a full timeout) of its own.
            # One that dropped a connection it had (an sshd restart) is dialled again, but
            # hosts that waited on an attempt share its outcome.
            if self._failure is not None and (not self._connected_once
                                              or attempts != self._attempts):
                raise type(self._failure)(label, self._failure.message)
            if self._client is not None:
                self._client.close()
                self._client = None
            self._attempts += 1
            try:
                self._client = self._open(options)
            except HostError as exc:
                self._failure = exc
                raise type(exc)(label, exc.message) from None
            self._failure = None
            self._connected_once = True
            transport = self._client.get_transport()
            assert transport is not None
            return transport

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


def _open_gateway(who: str, kind: str, target: Target, key_path: Path | None,
                  known_hosts: Path, sock: Callable[[], Sock | None],
                  options: DialSettings) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    # A gateway's key is checked exactly like a host's, never accepted unseen.
    client.set_missing_host_key_policy(StrictPolicy())
    try:
        if known_hosts.exists():
            options.known_hosts.trust(client, known_hosts, target.host, target.port)
    except (OSError, paramiko.SSHException) as exc:
        raise ConnectError(who, f"cannot connect to {who}: "
                                f"{connect_failure(exc, options.connect_timeout)}") from None
    handshake(client, target, sock, Peer(who, who, kind, known_hosts, key_path), options)
    return client


class Gateways:
    """The gateway connections of one run. Made by whoever runs the hosts and closed when
    they are closed: the connections are the run's, so they live here, not in a module."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gateways: dict[Hashable, _Gateway] = {}

    def _gateway(self, key: Hashable, endpoint: str,
                 opener: Callable[[DialSettings], paramiko.SSHClient]) -> _Gateway:
        with self._lock:
            gateway = self._gateways.get(key)
            if gateway is None:
                gateway = self._gateways[key] = _Gateway(endpoint, opener)
            return gateway

    def channel(self, label: str, ssh: SshConfig, options: DialSettings, host: str,
                port: int) -> paramiko.Channel:
        """A channel to `host`:`port` through the host's bastion: its SSH socket."""
        assert ssh.bastion is not None
        b = ssh.bastion
        known_hosts = (ssh.known_hosts or DEFAULT_KNOWN_HOSTS).expanduser()
        user = b.user or ssh.user
        key = ("bastion", b.address, b.port, user, str(b.key_path) if b.key_path else None,
               str(known_hosts))
        endpoint = SshConfig(b.address, b.port).endpoint

        def opener(options: DialSettings) -> paramiko.SSHClient:
            target = options.ssh_config.resolve(
                b.address, b.port, user, (str(b.key_path),) if b.key_path else ())
            who = f"bastion {endpoint}"
            return _open_gateway(who, "bastion", target, b.key_path, known_hosts,
                                 lambda: self.socket_for(who, target, known_hosts, options),
                                 options)

        bastion = self._gateway(key, endpoint, opener)
        return _forward(bastion.transport(label, options), label, ssh.endpoint,
                        f"bastion {endpoint}", host, port, options)

    def through_jumps(self, label: str, name: str, hops: tuple[Hop, ...], known_hosts: Path,
                      options: DialSettings, host: str, port: int) -> paramiko.Channel:
        """A channel to `host`:`port` through ProxyJump hosts, visited in order; each
        hop's connection is shared by every host that goes through the same hops."""
        transport: paramiko.Transport | None = None
        via = ""
        for index, hop in enumerate(hops):
            target = options.ssh_config.resolve_hop(hop)
            who = f"jump host {target.endpoint}"
            key = ("jump", hops[:index + 1], str(known_hosts))
            previous = transport

            def sock(target: Target = target, who: str = who,
                     previous: paramiko.Transport | None = previous,
                     via: str = via) -> Sock | None:
                if previous is None:  # the first hop: as its own ssh_config says
                    return self.socket_for(who, target, known_hosts, options)
                return _forward(previous, who, target.endpoint, via, target.host,
                                target.port, options)

            def opener(options: DialSettings, target: Target = target, who: str = who,
                       sock: Callable[[], Sock | None] = sock) -> paramiko.SSHClient:
                # No cluster.yaml key for a jump host: its IdentityFile, the agent, ~/.ssh.
                return _open_gateway(who, "jump host", target, None, known_hosts, sock,
                                     options)

            transport = self._gateway(key, target.endpoint, opener).transport(label, options)
            via = who
        assert transport is not None
        return _forward(transport, label, name, via, host, port, options)

    def socket_for(self, label: str, target: Target, known_hosts: Path,
                   options: DialSettings) -> Sock | None:
        """The socket of a connection to `target` through its ProxyCommand or ProxyJump;
        None for a direct one (paramiko dials it)."""
        if target.proxy_jump:
            return self.through_jumps(label, target.endpoint, target.proxy_jump, known_hosts,
                                      options, target.host, target.port)
        if target.proxy_command is not None:
            return paramiko.ProxyCommand(target.proxy_command)
        return None

    def close(self) -> None:
        with self._lock:
            gateways, self._gateways = list(self._gateways.values()), {}
        for gateway in gateways:
            gateway.close()


def _forward(transport: paramiko.Transport, label: str, name: str, via: str, host: str,
             port: int, options: DialSettings) -> paramiko.Channel:
    try:
        return transport.open_channel(
            "direct-tcpip", dest_addr=(host, port), src_addr=("", 0),
            # sshd's own connect to the host waits for the kernel's TCP timeout
            # (minutes): the host gets the connect timeout, as a direct connection.
            timeout=options.connect_timeout)
    except paramiko.ChannelException as exc:
        raise ConnectError(label, f"cannot connect to {name} through {via}: "
                                  f"{exc.text or 'refused'}") from None
    except (paramiko.SSHException, OSError, EOFError) as exc:
        raise ConnectError(label, f"cannot connect to {name} through {via}: "
                                  f"{connect_failure(exc, options.connect_timeout)}") from None
