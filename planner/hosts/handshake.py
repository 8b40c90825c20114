"""One SSH handshake over libssh2 (a host's, a bastion's or a jump host's): the key
exchange, the host key checked before any credential is offered, authentication, and one
line saying why it failed when it did. Every rule of a handshake is here, once.

Credentials are tried in the order OpenSSH's client (and paramiko before it) tries them:
cluster.yaml's key first, then the ssh-agent's keys, then ~/.ssh/config's IdentityFile
entries, then (only when cluster.yaml names no key) ~/.ssh/id_*. A key file that needs a
passphrase is left to the agent: cargoship never asks for one.
"""

from __future__ import annotations

import asyncio
import base64
import errno
import logging
import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ssh2 import exceptions as ssh2_errors
from ssh2.session import LIBSSH2_METHOD_HOSTKEY

from ..errors import ConnectError, HostKeyError
from .host_keys import AcceptNewPolicy, HostKey, KnownHostsFiles, fingerprint, known_hosts_name
from .ssh_config import SshConfigFiles, Target
from .stalls import HandshakeWatch, Stage, stalled
from .wire import EAGAIN, Wire

log = logging.getLogger("cargoship.planner")

_DEFAULT_KEYS = ("~/.ssh/id_rsa", "~/.ssh/id_ecdsa", "~/.ssh/id_ed25519")


class DialSettings(Protocol):
    """What a handshake and a gateway read of the run's settings (options.py's
    ConnectOptions is one): said here, where they are used, so that the host layer's
    modules import each other one way only."""

    @property
    def connect_timeout(self) -> float: ...
    @property
    def accept_new_host_keys(self) -> bool: ...
    @property
    def known_hosts_lock(self) -> threading.Lock: ...
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


@dataclass(frozen=True)
class Checks:
    """How this handshake judges the host key: `pinned`, the only fingerprint accepted
    (apply: the plan's); `accept_new`, record a key known_hosts lacks (never a changed
    one; never for a gateway)."""

    pinned: str | None = None
    accept_new: bool = False


async def shake(wire: Wire, target: Target, peer: Peer, options: DialSettings,
                checks: Checks, proxied: bool = False) -> str:
    """Key exchange, host key, authentication on `wire`'s connected socket, within the
    connect timeout; the host key's fingerprint. One-line HostError otherwise.
    `proxied`: the socket is a ProxyCommand's, whose silence is the command's stall."""
    timeout = options.connect_timeout
    watch = HandshakeWatch()
    name = known_hosts_name(target.host, target.port)
    try:
        known = options.known_hosts.lookup(peer.known_hosts, name) or {} \
            if peer.known_hosts.exists() else {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ConnectError(peer.label, f"cannot read known_hosts {peer.known_hosts}: "
                                       f"{exc}") from None
    try:
        async with asyncio.timeout(timeout):
            presented = await _exchange(wire, watch, peer, known, checks.pinned)
            _judge(peer, name, known, presented, checks, options)
            watch.kex_done = True
            await _authenticate(wire, target, peer)
    except TimeoutError:
        stage: Stage = watch.stage(wire.sock)
        if proxied and stage == "banner":
            stage = "proxy"
        raise ConnectError(peer.label, stalled(peer.name, stage, timeout)) from None
    except (OSError, EOFError) as exc:
        raise ConnectError(peer.label, f"cannot connect to {peer.name}: "
                                       f"{connect_failure(exc, timeout)}") from None
    except Exception as exc:
        if isinstance(exc, ssh2_errors.SSH2Error):
            raise ConnectError(peer.label, f"cannot connect to {peer.name}: "
                                           f"{ssh2_failure(exc, timeout, wire.session)}"
                               ) from None
        raise
    return fingerprint(presented)


async def _exchange(wire: Wire, watch: HandshakeWatch, peer: Peer,
                    known: dict[str, HostKey], pinned: str | None) -> HostKey:
    """The key exchange; the key the host presented."""
    session, sock = wire.session, wire.sock
    first = next((k for k, key in known.items() if fingerprint(key) == pinned), None) \
        if pinned else next(iter(known), None)
    session.method_pref(LIBSSH2_METHOD_HOSTKEY, ",".join(host_key_order(first)))
    while True:
        watch.look(sock)  # before libssh2 reads what came
        if session.handshake(sock) != EAGAIN:
            break
        await wire.wait()
    blob, _ = session.hostkey()
    presented = _host_key(blob)
    if presented is None:
        raise ConnectError(peer.label, f"cannot connect to {peer.name}: the host presented a "
                                       "host key that cannot be read")
    return presented


def _judge(peer: Peer, name: str, known: dict[str, HostKey], presented: HostKey,
           checks: Checks, options: DialSettings) -> None:
    """Refuse a host key that is revoked, not the pinned one, changed, or unknown (unless
    accepted)."""
    shown = fingerprint(presented)
    if peer.known_hosts.exists() and options.known_hosts.revoked(peer.known_hosts, presented):
        raise HostKeyError(peer.label, f"host key {shown} of {peer.name} is marked @revoked in "
                                       f"{peer.known_hosts}: refusing it (whoever holds it "
                                       "may not be the host)")
    if checks.pinned is not None and shown != checks.pinned:
        # The pinned key is the one known_hosts had at plan time: it changed since.
        raise changed_key(peer, checks.pinned, shown)
    expected = known.get(presented.get_name())
    if expected is None:
        if not checks.accept_new:
            raise unknown_key(peer, shown)
        AcceptNewPolicy(peer.known_hosts, options.known_hosts_lock).record(name, presented)
    elif expected.asbytes() != presented.asbytes():
        raise changed_key(peer, fingerprint(expected), shown)


async def _authenticate(wire: Wire, target: Target, peer: Peer) -> None:
    session = wire.session
    user = target.user
    for key in _key_files(peer.key_path, target.identity_files):
        if key is None:
            if await _agent(wire, user):
                return
            continue
        cert = Path(f"{key}-cert.pub")
        try:
            if cert.exists():
                try:
                    await wire.call(session.userauth_publickey_fromfile, user, str(key), "",
                                    str(cert))
                    return
                except ssh2_errors.SSH2Error as exc:
                    if not _refused(exc):
                        raise
            await wire.call(session.userauth_publickey_fromfile, user, str(key))
            return
        except ssh2_errors.SSH2Error as exc:
            if not _refused(exc):
                raise
            log.debug("%s: key %s refused (%s)", peer.label, key, type(exc).__name__)
    raise ConnectError(peer.label, auth_failure(f"{user}@{peer.name}", peer.key_path))


def _key_files(key_path: Path | None, identity_files: tuple[str, ...],
               ) -> Iterator[Path | None]:
    """Each key file to offer, in order; None where the agent's keys come."""
    seen: set[Path] = set()

    def usable(text: str | Path) -> Path | None:
        path = Path(text).expanduser()
        if path in seen or not path.is_file() or _encrypted(path):
            return None
        seen.add(path)
        return path

    if key_path is not None and (path := usable(key_path)) is not None:
        yield path
    yield None
    for text in identity_files:
        if (path := usable(text)) is not None:
            yield path
    if key_path is None:
        for text in _DEFAULT_KEYS:
            if (path := usable(text)) is not None:
                yield path


async def _agent(wire: Wire, user: str) -> bool:
    """Whether one of the ssh-agent's keys was accepted (False: no agent, or none was)."""
    if not os.environ.get("SSH_AUTH_SOCK"):
        return False
    session = wire.session
    try:
        agent = session.agent_init()
        agent.connect()
        agent.list_identities()
        identities = agent.get_identities()
    except ssh2_errors.SSH2Error as exc:
        log.debug("ssh-agent unavailable: %s", type(exc).__name__)
        return False
    try:
        for identity in identities:
            try:
                await wire.call(agent.userauth, user, identity)
                return True
            except ssh2_errors.SSH2Error as exc:
                if not _refused(exc):
                    raise
        return False
    finally:
        try:
            agent.disconnect()
        except ssh2_errors.SSH2Error:
            pass


def host_key_order(first: str | None) -> list[str]:
    """Host key algorithms in OpenSSH's preference, the type known_hosts has first for
    the host moved to the front (as OpenSSH does), so the key a host presents is the one
    known_hosts holds when it holds one."""
    order = list(HOST_KEY_ORDER)
    if first is not None:
        wanted = ["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"] if first == "ssh-rsa" else [first]
        order = wanted + [kind for kind in order if kind not in wanted]
    return [kind for kind in order if kind in HOST_KEY_ORDER]


# libssh2 1.11's host key algorithms without certificates (cargoship never asks for one),
# in the order a plan has recorded fingerprints in since its first release.
HOST_KEY_ORDER = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
                  "ecdsa-sha2-nistp521", "rsa-sha2-512", "rsa-sha2-256", "ssh-rsa")


def _host_key(blob: bytes) -> HostKey | None:
    """The key a host presented, from its wire blob (which starts with its type's name)."""
    return HostKey.from_blob(blob)


def _refused(exc: BaseException) -> bool:
    return isinstance(exc, (ssh2_errors.AuthenticationError, ssh2_errors.PublicKeyError,
                            ssh2_errors.PublickeyUnverifiedError,
                            ssh2_errors.PublicKeyInitError, ssh2_errors.FileError,
                            ssh2_errors.MethodNoneError,
                            ssh2_errors.AgentAuthenticationError))


def ssh2_name(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def ssh2_failure(exc: BaseException, timeout: float, session: Any = None) -> str:
    """Why a libssh2 call failed during a handshake, in the words connect_failure uses;
    an error with no words of ours gets libssh2's own (the session's last error)."""
    if isinstance(exc, ssh2_errors.Timeout):
        return connect_failure(TimeoutError(), timeout)
    if isinstance(exc, (ssh2_errors.SocketDisconnectError, ssh2_errors.SocketRecvError,
                        ssh2_errors.BannerRecvError)):
        return "the host closed the connection during the SSH handshake"
    if isinstance(exc, (ssh2_errors.KexFailureError, ssh2_errors.KeyExchangeError,
                        ssh2_errors.MethodNotSupported, ssh2_errors.AlgoUnsupportedError)):
        return "no key exchange, cipher or host key algorithm in common with the host"
    return f"SSH handshake failed ({ssh2_name(exc)}{_libssh2_said(session)})"


def _libssh2_said(session: Any) -> str:
    # A bare SSH2Error (libssh2's -1, which several internal failures return) says
    # nothing by itself; the session's last error names the step that failed.
    try:
        code, said = session.last_errno(), session.last_error()
    except Exception:  # noqa: BLE001 - no session, or one that cannot say: nothing to add
        return ""
    text = said.decode("utf-8", "replace") if isinstance(said, bytes) else str(said or "")
    return f": libssh2 error {code}, {text}" if code or text else ""


def connect_failure(exc: BaseException, timeout: float) -> str:
    """Why a TCP/SSH connection failed, in words that tell the usual causes apart."""
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
    header."""
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
