"""SSH sessions to hosts: fabric for configuration, paramiko channels for commands.

fabric resolves ~/.ssh/config, keys, the agent and a bastion (ProxyJump-style gateway).
Two of its defaults are wrong for a tool that changes production hosts, so they are
overridden here: it accepts any host key it has not seen and it never reads known_hosts.
Host keys are checked strictly against known_hosts unless the user opts in to accepting
keys of hosts never seen before; a key that *changed* is refused either way.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import fabric
import paramiko

from ..config.model import Bastion, SshConfig
from ..errors import (
    CommandError,
    CommandTimeout,
    ConnectError,
    ConnectionLost,
    HostError,
    HostKeyError,
)
from .reach import Dialled

log = logging.getLogger("cargoship.planner")

MAX_OUTPUT = 16 << 20  # bytes per command; a host that sends more is lying or broken
# The exit code of a command whose output the caller stopped reading (run's on_stdout).
ABANDONED = -2
OnStdout = Callable[[bytes], bool]
DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts")


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH-style SHA256 fingerprint, as `ssh-keygen -lf` prints it."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def known_hosts_name(address: str, port: int) -> str:
    return address if port == 22 else f"[{address}]:{port}"


class _UnknownHostKey(Exception):
    def __init__(self, key: paramiko.PKey) -> None:
        self.key = key


class _StrictPolicy(paramiko.MissingHostKeyPolicy):
    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        raise _UnknownHostKey(key)


class _AcceptNewPolicy(paramiko.MissingHostKeyPolicy):
    """Like OpenSSH's StrictHostKeyChecking=accept-new: record unseen keys, never changed ones."""

    def __init__(self, path: Path, lock: threading.Lock) -> None:
        self.path = path
        self.lock = lock

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        with self.lock:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "a") as fh:
                fh.write(line)
        log.warning("accepted new host key %s for %s into %s", fingerprint(key), hostname,
                    self.path)


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    stdout: bytes
    stderr: bytes


# A bastion as one connection serves it: address, port, user, key file, known_hosts file.
BastionKey = tuple[str, int, str | None, str | None, str]


class _Bastion:
    """One bastion's connection, opened once for every host behind it."""

    def __init__(self, bastion: Bastion, user: str | None, known_hosts: Path) -> None:
        self.bastion = bastion
        self.user = user
        self.known_hosts = known_hosts
        self.endpoint = SshConfig(bastion.address, bastion.port).endpoint
        self._lock = threading.Lock()
        self._conn: fabric.Connection | None = None
        self._failure: HostError | None = None
        self._connected_once = False
        self._attempts = 0

    def transport(self, label: str, options: ConnectOptions) -> paramiko.Transport:
        attempts = self._attempts
        with self._lock:
            transport: paramiko.Transport | None = \
                self._conn.client.get_transport() if self._conn is not None else None
            if transport is not None and transport.is_active():
                return transport
            # A bastion that never answered is dead for this run: every host behind it
            # gets that one attempt's error, not an attempt (a full timeout) of its own.
            # One that dropped a connection it had (an sshd restart) is dialled again, but
            # hosts that waited on an attempt share its outcome.
            if self._failure is not None and (not self._connected_once
                                              or attempts != self._attempts):
                raise type(self._failure)(label, self._failure.message)
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._attempts += 1
            try:
                self._conn = self._open(options)
            except HostError as exc:
                self._failure = exc
                raise type(exc)(label, exc.message) from None
            self._failure = None
            self._connected_once = True
            transport = self._conn.client.get_transport()
            assert transport is not None
            return transport

    def _open(self, options: ConnectOptions) -> fabric.Connection:
        b = self.bastion
        conn = fabric.Connection(host=b.address, port=b.port, user=self.user,
                                 connect_timeout=max(1, round(options.connect_timeout)),
                                 connect_kwargs=_auth_kwargs(b.key_path))
        who = f"bastion {self.endpoint}"
        # The bastion's key is checked exactly like a host's, never accepted unseen.
        conn.client.set_missing_host_key_policy(_StrictPolicy())
        try:
            if self.known_hosts.exists():
                _trust_known(conn.client, self.known_hosts, conn.host, conn.port)
        except (OSError, paramiko.SSHException) as exc:
            raise ConnectError(who, f"cannot connect to {who}: "
                                    f"{connect_failure(exc, options.connect_timeout)}") from None
        _open_explained(conn, who, who, self.known_hosts, b.key_path,
                        options.connect_timeout, peer="bastion")
        transport = conn.client.get_transport()
        assert transport is not None
        _set_nodelay(transport)
        return conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


class Gateways:
    """The connections to bastions of one run: one per bastion, each host behind it a
    direct-tcpip channel over it.

    A connection per host made the bastion take as many unauthenticated connections at
    once as hosts connect at once, and OpenSSH's default MaxStartups (10:30:100) drops
    most of them. Made by whoever runs the hosts and closed when they are closed: the
    connections are the run's, so they live here and not in the module."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bastions: dict[BastionKey, _Bastion] = {}

    def channel(self, label: str, ssh: SshConfig, options: ConnectOptions, host: str,
                port: int) -> paramiko.Channel:
        """A channel to `host`:`port` through the host's bastion: its SSH socket."""
        assert ssh.bastion is not None
        b = ssh.bastion
        known_hosts = (ssh.known_hosts or DEFAULT_KNOWN_HOSTS).expanduser()
        user = b.user or ssh.user
        key = (b.address, b.port, user, str(b.key_path) if b.key_path else None,
               str(known_hosts))
        with self._lock:
            bastion = self._bastions.get(key)
            if bastion is None:
                bastion = self._bastions[key] = _Bastion(b, user, known_hosts)
        transport = bastion.transport(label, options)
        try:
            return transport.open_channel(
                "direct-tcpip", dest_addr=(host, port), src_addr=("", 0),
                # sshd's own connect to the host waits for the kernel's TCP timeout
                # (minutes): the host gets the connect timeout, as a direct connection.
                timeout=options.connect_timeout)
        except paramiko.ChannelException as exc:
            raise ConnectError(label, f"cannot connect to {ssh.endpoint} through bastion "
                                      f"{bastion.endpoint}: {exc.text or 'refused'}") from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise ConnectError(label, f"cannot connect to {ssh.endpoint} through bastion "
                                      f"{bastion.endpoint}: "
                                      f"{connect_failure(exc, options.connect_timeout)}") \
                from None

    def close(self) -> None:
        with self._lock:
            bastions, self._bastions = list(self._bastions.values()), {}
        for bastion in bastions:
            bastion.close()


@dataclass(frozen=True)
class ConnectOptions:
    connect_timeout: float = 10.0
    accept_new_host_keys: bool = False
    # Serialises appends to known_hosts files when many hosts connect at once.
    known_hosts_lock: threading.Lock = field(default_factory=threading.Lock)
    # The run's bastion connections; whoever closes the run's hosts closes these.
    gateways: Gateways = field(default_factory=Gateways)
    # TCP connections to directly reached hosts, all opened at once (reach.py).
    dialled: Dialled = field(default_factory=Dialled)


class SshSession:
    """One open SSH connection. Thread-safe for sequential use by one phase at a time."""

    def __init__(self, label: str, conn: fabric.Connection, host_key: paramiko.PKey) -> None:
        self.label = label
        self._conn = conn
        # As resolved through ~/.ssh/config: what was really used.
        self.user: str = conn.user
        self.endpoint = f"{conn.host}:{conn.port}"
        self.host_key_fingerprint = fingerprint(host_key)
        self.round_trips = 0

    def run(self, command: str, timeout: float, stdin: bytes | None = None,
            on_stdout: OnStdout | None = None) -> CommandResult:
        """Run one command. Data such as file content goes through `stdin`, never the
        command line, which other users of the host can read in the process list.
        `on_stdout` is handed stdout as it arrives; when it returns False the command is
        abandoned (its channel closed) and the result has exit code ABANDONED."""
        transport = self._conn.client.get_transport()
        if transport is None or not transport.is_active():
            raise ConnectionLost(self.label, "SSH connection is closed")
        self.round_trips += 1
        try:
            channel = transport.open_session(timeout=timeout)
            try:
                channel.exec_command(command)
                if stdin:
                    try:
                        channel.sendall(stdin)
                    except OSError:
                        # The command ended without reading all of its input (a lock
                        # found held, a refusal): the channel is closed, the connection
                        # is not. Its exit status and output say what happened.
                        if not transport.is_active():
                            raise
                if not channel.closed:
                    channel.shutdown_write()
                return _collect(self.label, channel, timeout, on_stdout)
            finally:
                channel.close()
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise ConnectionLost(self.label,
                                 f"SSH connection lost: {exc or type(exc).__name__}") from None

    def close(self) -> None:
        self._conn.close()


def _collect(label: str, channel: paramiko.Channel, timeout: float,
             on_stdout: OnStdout | None = None) -> CommandResult:
    """Read stdout and stderr until the command's EOF, then wait for its exit status.

    Waits block (on the channel until data or EOF, then an event for the exit status):
    once EOF has arrived the channel stays readable, so polling select() past it spun
    until the exit status came, ~80 wake-ups per command fighting the transport thread
    for the GIL (~4 ms CPU per command, most of a plan's CPU with hundreds of hosts).
    """
    deadline = time.monotonic() + timeout
    out, err = bytearray(), bytearray()

    def take(data: bytes) -> bool:
        out.extend(data)
        return on_stdout is None or on_stdout(data)

    while True:
        # EOF first: everything sent before it is in the buffers drained just below.
        eof = channel.eof_received or channel.closed
        keep = True
        while channel.recv_ready():
            keep = take(channel.recv(65536)) and keep
        if not keep:
            return CommandResult(ABANDONED, bytes(out), bytes(err))
        while channel.recv_stderr_ready():
            err += channel.recv_stderr(65536)
        if len(out) + len(err) > MAX_OUTPUT:
            raise CommandError(label, f"remote output exceeded {MAX_OUTPUT >> 20} MiB")
        if eof:
            break
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise CommandTimeout(label, f"remote command timed out after {timeout:g}s")
        # Blocks until stdout data or EOF (no OS pipe per channel, as select() needs);
        # stderr alone does not wake it, so it is drained at least every 0.2 s.
        channel.settimeout(min(remaining, 0.2))
        try:
            if not take(channel.recv(65536)):
                return CommandResult(ABANDONED, bytes(out), bytes(err))
        except TimeoutError:
            # No output for a while: the caller may have stopped listening meanwhile.
            if not take(b""):
                return CommandResult(ABANDONED, bytes(out), bytes(err))
    # The exit status follows EOF (or the channel closed without one: status -1).
    if not channel.status_event.wait(max(0.0, deadline - time.monotonic())):
        raise CommandTimeout(label, f"remote command timed out after {timeout:g}s")
    status = channel.recv_exit_status()
    if status == -1:
        # paramiko's value when the channel closed without an exit status: the server side
        # went away mid-command, so whether the command ran (in full) is unknown.
        raise ConnectionLost(label, "SSH connection lost before the command finished")
    return CommandResult(status, bytes(out), bytes(err))


_known_hosts: dict[str, tuple[tuple[int, int], paramiko.HostKeys]] = {}
_known_hosts_lock = threading.Lock()


def _parsed_known_hosts(path: Path) -> paramiko.HostKeys:
    """A known_hosts file parsed once per version of it, not once per connection: with
    hundreds of hosts sharing one file, parsing it for each host was most of a plan's CPU
    time (quadratic in the fleet size) and contended on paramiko's logger lock."""
    stat = path.stat()
    version = (stat.st_mtime_ns, stat.st_size)
    with _known_hosts_lock:
        cached = _known_hosts.get(str(path))
        if cached is None or cached[0] != version:
            cached = (version, paramiko.HostKeys(str(path)))
            _known_hosts[str(path)] = cached
        return cached[1]


def _trust_known(client: paramiko.SSHClient, path: Path, host: str, port: int) -> None:
    """Give the client the keys known_hosts has for this host: exactly what
    SSHClient.load_host_keys would have let it check (hashed entries included)."""
    name = known_hosts_name(host, port)
    entries = _parsed_known_hosts(path).lookup(name)
    if entries is not None:
        for key_type in entries:
            client.get_host_keys().add(name, key_type, entries[key_type])


def open_session(label: str, ssh: SshConfig, options: ConnectOptions,
                 pinned: str | None = None) -> SshSession:
    """`pinned`: the only host key fingerprint to accept (apply: the plan's), checked
    before authenticating, so a host presenting any other key never sees a login."""
    known_hosts = (ssh.known_hosts or DEFAULT_KNOWN_HOSTS).expanduser()
    conn = _connection(ssh, options)
    client = conn.client
    if known_hosts.exists():
        try:
            # The name paramiko looks up: the host as resolved through ~/.ssh/config.
            _trust_known(client, known_hosts, conn.host, conn.port)
        except (OSError, paramiko.SSHException) as exc:
            raise ConnectError(label, f"cannot read known_hosts {known_hosts}: {exc}") from None
    if pinned is not None and not _pin(client, known_hosts_name(conn.host, conn.port), pinned):
        raise HostKeyError(label, f"{known_hosts} has no key for {ssh.endpoint} matching the "
                                  f"one the plan was made against {pinned}: refusing before "
                                  "connecting (re-plan if the host was rebuilt)")
    client.set_missing_host_key_policy(
        _AcceptNewPolicy(known_hosts, options.known_hosts_lock)
        if options.accept_new_host_keys else _StrictPolicy()
    )
    if ssh.bastion is not None:
        conn.connect_kwargs["sock"] = options.gateways.channel(label, ssh, options, conn.host,
                                                               conn.port)
    elif conn.gateway is None:
        dialled = options.dialled.take((conn.host, conn.port), options.connect_timeout + 5)
        if isinstance(dialled, OSError):
            raise ConnectError(label, f"cannot connect to {ssh.endpoint}: "
                                      f"{connect_failure(dialled, options.connect_timeout)}")
        if dialled is not None:
            conn.connect_kwargs["sock"] = dialled
    _open_explained(conn, label, ssh.endpoint, known_hosts, ssh.key_path,
                    options.connect_timeout, peer="host",
                    unknown_hint=", or run with --accept-new-host-keys",
                    changed_hint=". If the host was reinstalled, remove its old entry "
                                 "(ssh-keygen -R) and verify the new key")
    transport = conn.client.get_transport()
    assert transport is not None
    _set_nodelay(transport)
    return SshSession(label, conn, transport.get_remote_server_key())


def _open_explained(conn: fabric.Connection, label: str, name: str, known_hosts: Path,
                    key_path: Path | None, timeout: float, *, peer: str,
                    unknown_hint: str = "", changed_hint: str = "") -> None:
    """Open the connection, or close it and say in one line why it could not be opened:
    a host key unknown or changed, credentials refused, or no connection at all."""
    try:
        conn.open()
    except _UnknownHostKey as exc:
        conn.close()
        raise HostKeyError(label, f"host key {fingerprint(exc.key)} of {name} is not in "
                                  f"{known_hosts}; verify it and add it{unknown_hint}") from None
    except paramiko.BadHostKeyException as exc:
        conn.close()
        raise HostKeyError(
            label, f"host key of {name} CHANGED: {known_hosts} has "
                   f"{fingerprint(exc.expected_key)}, the {peer} presented "
                   f"{fingerprint(exc.key)}; possible man-in-the-middle{changed_hint}") from None
    except paramiko.AuthenticationException:
        conn.close()
        raise ConnectError(label, auth_failure(f"{conn.user}@{name}", key_path)) from None
    except (paramiko.SSHException, OSError, EOFError) as exc:
        conn.close()
        raise ConnectError(label, f"cannot connect to {name}: "
                                  f"{connect_failure(exc, timeout)}") from None


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


def _pin(client: paramiko.SSHClient, name: str, pinned: str) -> bool:
    """Keep only the known_hosts key with the pinned fingerprint for this host; paramiko then
    refuses any other key at key exchange, before authentication."""
    keys = client.get_host_keys()
    kept = [(kind, key) for kind, key in (keys.lookup(name) or {}).items()
            if fingerprint(key) == pinned]
    if not kept:
        return False
    keys.clear()
    for kind, key in kept:
        keys.add(name, kind, key)
    return True


# paramiko's transport thread wakes every 0.1 s (its socket timeout) to look for a close:
# with hundreds of sessions open, 10 wake-ups a second each cost more CPU than the plan's
# own reads while it waits on the network. Closing does not wait for that wake-up (it
# closes the socket and returns), so once a session is up, once a second is plenty.
IDLE_WAKEUP = 1.0


def _set_nodelay(transport: paramiko.Transport) -> None:
    # Without TCP_NODELAY, Nagle + delayed ACK add ~40 ms to every small exec round trip.
    sock = transport.sock
    if isinstance(sock, socket.socket):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(IDLE_WAKEUP)


# A fabric Config is NOT shared between connections: Connection() writes into it
# (inline_ssh_env), and invoke's Config is not safe to change while other threads read it.
_keys: dict[str, paramiko.PKey | None] = {}
_shared_lock = threading.Lock()


def _private_key(path: Path) -> paramiko.PKey | None:
    """The key file parsed once per run (paramiko otherwise parses it per connection, once
    per key class it tries). None where paramiko's own handling is needed: a key with a
    passphrase or a certificate beside it, or one it cannot read here."""
    with _shared_lock:
        if str(path) not in _keys:
            key: paramiko.PKey | None = None
            if not Path(f"{path}-cert.pub").exists():
                try:
                    key = paramiko.PKey.from_path(path)
                except (OSError, paramiko.SSHException, ValueError, TypeError):
                    key = None
            _keys[str(path)] = key
        return _keys[str(path)]


def direct_endpoint(ssh: SshConfig, options: ConnectOptions) -> tuple[str, int] | None:
    """Where a host's TCP connection goes, as ~/.ssh/config resolves it; None when it goes
    through a bastion or a ProxyJump/ProxyCommand (those dial for themselves)."""
    if ssh.bastion is not None:
        return None
    conn = _connection(ssh, options)
    return None if conn.gateway is not None else (conn.host, conn.port)


def _connection(ssh: SshConfig, options: ConnectOptions) -> fabric.Connection:
    return fabric.Connection(
        host=ssh.address, port=ssh.port, user=ssh.user,
        connect_timeout=max(1, round(options.connect_timeout)),
        connect_kwargs=_auth_kwargs(ssh.key_path),
    )


def _auth_kwargs(key_path: Path | None) -> dict[str, object]:
    if key_path is None:
        return {"allow_agent": True, "look_for_keys": True}
    # An explicit key is tried first; the agent stays available as a fallback.
    kwargs: dict[str, object] = {"key_filename": [str(key_path)], "allow_agent": True,
                                 "look_for_keys": False}
    key = _private_key(key_path.expanduser())
    if key is not None:
        kwargs["pkey"] = key
    return kwargs
