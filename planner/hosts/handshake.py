"""One SSH handshake (a host's, a bastion's or a jump host's): credentials, and one line
saying why it failed when it did."""

from __future__ import annotations

import base64
import errno
import os
import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import paramiko

from ..errors import ConnectError, HostKeyError
from .host_keys import KnownHostsFiles, UnknownHostKey, fingerprint
from .ssh_config import SshConfigFiles, Target
from .stalls import BoundedTransport, Stage, stalled

if TYPE_CHECKING:
    from paramiko.transport import _SocketLike

# What paramiko accepts as a connection's socket: a socket, a channel through a gateway,
# or a ProxyCommand's pipes.
Sock = socket.socket | paramiko.Channel | paramiko.ProxyCommand


@dataclass
class PrivateKeys:
    """The run's key files, each parsed once (paramiko otherwise parses a key file per
    connection, once per key class it tries)."""

    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _parsed: dict[str, paramiko.PKey | None] = field(default_factory=dict, repr=False)

    def parsed(self, path: Path) -> paramiko.PKey | None:
        """None where paramiko's own handling is needed: a key with a passphrase or a
        certificate beside it, or one it cannot read here."""
        with self._lock:
            if str(path) not in self._parsed:
                key: paramiko.PKey | None = None
                if not Path(f"{path}-cert.pub").exists():
                    try:
                        key = paramiko.PKey.from_path(path)
                    except (OSError, paramiko.SSHException, ValueError, TypeError):
                        key = None
                self._parsed[str(path)] = key
            return self._parsed[str(path)]

    def auth_kwargs(self, key_path: Path | None, identity_files: tuple[str, ...],
                    ) -> dict[str, Any]:
        """SSHClient.connect's credentials: `identity_files` are cluster.yaml's key (first,
        when given) and ssh_config's IdentityFile entries."""
        kwargs: dict[str, Any] = {"allow_agent": True}
        if identity_files:
            kwargs["key_filename"] = list(identity_files)
        if key_path is None:
            kwargs["look_for_keys"] = True
            return kwargs
        # An explicit key is tried first; the agent stays available as a fallback.
        kwargs["look_for_keys"] = False
        key = self.parsed(key_path.expanduser())
        if key is not None:
            kwargs["pkey"] = key
        return kwargs


class DialSettings(Protocol):
    """What a handshake and a gateway read of the run's settings (options.py's
    ConnectOptions is one): said here, where they are used, so that the host layer's
    modules import each other one way only."""

    @property
    def connect_timeout(self) -> float: ...
    @property
    def keys(self) -> PrivateKeys: ...
    @property
    def known_hosts(self) -> KnownHostsFiles: ...
    @property
    def ssh_config(self) -> SshConfigFiles: ...


@dataclass(frozen=True)
class Peer:
    """Whom a handshake is with, as its errors name it."""

    label: str  # whose error it is (a host's label, or the bastion's own name)
    name: str  # "10.0.0.1:22", "bastion 10.0.0.9:22"
    kind: str  # "host", "bastion", "jump host": who presented a changed key
    known_hosts: Path
    key_path: Path | None
    unknown_hint: str = ""
    changed_hint: str = ""


def host_peer(label: str, endpoint: str, known_hosts: Path, key_path: Path | None) -> Peer:
    """A cluster host as the other end of a handshake (not a bastion or jump host)."""
    return Peer(label, endpoint, "host", known_hosts, key_path,
                unknown_hint=", or run with --accept-new-host-keys",
                changed_hint=". If the host was reinstalled, remove its old entry "
                             "(ssh-keygen -R) and verify the new key")


def unknown_key(peer: Peer, presented: str) -> HostKeyError:
    return HostKeyError(peer.label, f"host key {presented} of {peer.name} is not in "
                                    f"{peer.known_hosts}; verify it and add it"
                                    f"{peer.unknown_hint}")


def changed_key(peer: Peer, expected: str, presented: str) -> HostKeyError:
    return HostKeyError(peer.label, f"host key of {peer.name} CHANGED: {peer.known_hosts} has "
                                    f"{expected}, the {peer.kind} presented {presented}; "
                                    f"possible man-in-the-middle{peer.changed_hint}")


def aead_first(sock: _SocketLike, /, *, gss_kex: bool, gss_deleg_creds: bool,
               disabled_algorithms: Mapping[str, Iterable[str]] | None,
               timeout: float) -> paramiko.Transport:
    """A Transport that prefers AES-GCM: its integrity check is part of the cipher (C, in
    cryptography), where paramiko's default AES-CTR + HMAC checks every packet's MAC byte
    by byte in Python, most of a plan's client CPU after the key exchange. Servers without
    GCM (OpenSSH before 6.2) still get the default ciphers, in their default order. Its
    handshake has one deadline, `timeout` from now (stalls.py)."""
    del gss_kex, gss_deleg_creds  # cargoship never asks for GSS-API key exchange
    transport = BoundedTransport(sock, timeout=timeout, disabled_algorithms=disabled_algorithms)
    options = transport.get_security_options()
    ciphers = tuple(options.ciphers)
    preferred = tuple(c for c in ciphers if c.endswith("-gcm@openssh.com"))
    options.ciphers = preferred + tuple(c for c in ciphers if c not in preferred)
    return transport


def handshake(client: paramiko.SSHClient, target: Target, sock: Callable[[], Sock | None],
              peer: Peer, options: DialSettings) -> paramiko.Transport:
    """Connect and authenticate, or close everything and say in one line why not: a host
    key unknown or changed, credentials refused, or no connection at all. `sock` makes the
    connection's socket (None: paramiko dials `target` itself); its errors are the
    connection's."""
    timeout = options.connect_timeout
    opened: Sock | None = None
    try:
        opened = sock()
        # The TCP connection (when paramiko dials) and then the handshake each get the
        # connect timeout, as on libssh2; unrounded, as the messages say it.
        client.connect(target.host, target.port, target.user, sock=opened, timeout=timeout,
                       transport_factory=partial(aead_first, timeout=timeout),
                       **options.keys.auth_kwargs(peer.key_path, target.identity_files))
    except UnknownHostKey as exc:
        _close(client, opened)
        raise unknown_key(peer, fingerprint(exc.key)) from None
    except paramiko.BadHostKeyException as exc:
        _close(client, opened)
        raise changed_key(peer, fingerprint(exc.expected_key), fingerprint(exc.key)) from None
    except paramiko.AuthenticationException as exc:
        # Out of time with no answer (paramiko's "Authentication timeout."), not a key
        # refused, however late the refusal came.
        stage = _stalled_at(client, opened) if "timeout" in str(exc).lower() else None
        _close(client, opened)
        if stage is not None:
            raise ConnectError(peer.label, stalled(peer.name, stage, timeout)) from None
        raise ConnectError(peer.label, auth_failure(f"{target.user}@{peer.name}",
                                                    peer.key_path)) from None
    except (paramiko.SSHException, OSError, EOFError) as exc:
        stage = _stalled_at(client, opened)
        _close(client, opened)
        if stage is not None:
            raise ConnectError(peer.label, stalled(peer.name, stage, timeout)) from None
        raise ConnectError(peer.label, f"cannot connect to {peer.name}: "
                                       f"{connect_failure(exc, timeout)}") from None
    except BaseException:
        _close(client, opened)
        raise
    transport = client.get_transport()
    assert transport is not None
    set_nodelay(transport)
    return transport


def _stalled_at(client: paramiko.SSHClient, sock: Sock | None) -> Stage | None:
    """Where the handshake ran out of time once connected (a transport exists only then;
    a gateway's channel opens only once the gateway has connected); None when it did not,
    or failed for another reason. A ProxyCommand's pipe says nothing of whether the
    command itself got through: no banner there is the command's "proxy" stage."""
    transport = client.get_transport()
    stage = transport.stage() if isinstance(transport, BoundedTransport) else None
    return "proxy" if stage == "banner" and isinstance(sock, paramiko.ProxyCommand) else stage


def _close(client: paramiko.SSHClient, sock: Sock | None) -> None:
    client.close()
    if sock is not None:
        try:
            sock.close()  # a channel, or a ProxyCommand's process, made before any transport
        except (OSError, paramiko.SSHException):
            pass


def connect_failure(exc: BaseException, timeout: float) -> str:
    """Why a TCP/SSH connection failed, in words that tell the usual causes apart."""
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError) and exc.errors:
        # paramiko's wrapper when every address failed: the first address's reason.
        exc = next(iter(exc.errors.values()))
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return (f"timed out after {timeout:g}s (host down, or a firewall dropping port "
                "22's packets; options.ssh.connectTimeoutSeconds)")
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (the host is up but nothing listens on that port: sshd down?)"
    if isinstance(exc, OSError) and exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return "no route to host (wrong address, host down, or a network in between)"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def auth_failure(who: str, key_path: Path | None) -> str:
    """Which credentials were tried, and why an encrypted key could not be one of them."""
    agent = os.environ.get("SSH_AUTH_SOCK")
    if key_path is None:
        return (f"authentication failed for {who} with the ssh-agent's keys and ~/.ssh/id_* "
                "(set ssh.keyPath to name the key)")
    key = key_path.expanduser()
    if _encrypted(key):
        where = "no ssh-agent is running (SSH_AUTH_SOCK is not set)" if not agent else \
            "the ssh-agent does not hold it"
        return (f"authentication failed for {who}: key {key} is passphrase-protected and "
                f"{where}; add it with ssh-add {key}")
    return (f"authentication failed for {who}: the host accepted neither key {key}"
            + (" nor the ssh-agent's keys" if agent else "") + " (is its .pub in the user's "
            "authorized_keys?)")


def _encrypted(key: Path) -> bool:
    """Whether a private key file needs a passphrase (PEM or OpenSSH format), read from its
    header: paramiko's own errors for this differ by key type and version."""
    try:
        text = key.read_text(errors="replace")[:65536]
    except OSError:
        return False
    if "ENCRYPTED" in text.split("\n\n", 1)[0]:
        return True
    if "BEGIN OPENSSH PRIVATE KEY" not in text:
        return False
    body = "".join(line for line in text.splitlines() if line and "-----" not in line)
    try:
        raw = base64.b64decode(body)
    except ValueError:
        return False
    magic = b"openssh-key-v1\0"
    if not raw.startswith(magic) or len(raw) < len(magic) + 4:
        return False
    size = int.from_bytes(raw[len(magic):len(magic) + 4], "big")
    return raw[len(magic) + 4:len(magic) + 4 + size] != b"none"


# paramiko's transport thread wakes every 0.1 s (its socket timeout) to look for a close:
# with hundreds of sessions open, 10 wake-ups a second each cost more CPU than the plan's
# own reads while it waits on the network. Closing does not wait for that wake-up (it
# closes the socket and returns), so once a session is up, once a second is plenty.
IDLE_WAKEUP = 1.0


def set_nodelay(transport: paramiko.Transport) -> None:
    # Without TCP_NODELAY, Nagle + delayed ACK add ~40 ms to every small exec round trip.
    sock = transport.sock
    if isinstance(sock, socket.socket):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(IDLE_WAKEUP)
