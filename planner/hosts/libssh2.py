"""A plan's SSH sessions on libssh2 (ssh2-python), where they give the same answers as
ssh.py's paramiko sessions.

The read side of a plan is one handshake and one exec per host. paramiko's pure-Python
transport spends 10-14 ms of client CPU on that, libssh2 about 2 ms (tests/bench/
FINDINGS.md), which was most of a large plan's CPU. So a plan takes this path for a host
that is reached directly (no bastion, ProxyJump or ProxyCommand) with an explicit key file
that needs no passphrase and has no certificate, and ssh.py's for any other host (see
handshakes.py). Authentication that fails here is tried again through ssh.py, on a new
connection, so the agent, ssh_config's identity files and the words of the error are the
same as ever.

Host keys are checked exactly as paramiko checks them, before authenticating: the same
parsed known_hosts entries, the same host key algorithm preference (the first type
known_hosts has for the host, then paramiko's order), so the fingerprint a plan records is
the one apply's paramiko session is pinned to; a key never seen is refused or, with
--accept-new-host-keys, recorded by the same policy code; a changed key is refused.

Every handshake and command runs on the run's SSH loop (ssh_loop.py), one thread for all
hosts. The sessions only run the planner's read commands, never with stdin: apply's
writers use ssh.py.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Generator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko

from ..config.model import SshConfig
from ..errors import CommandError, CommandTimeout, ConnectError, ConnectionLost
from .handshake import Peer, changed_key, connect_failure, host_peer, unknown_key
from .host_keys import DEFAULT_KNOWN_HOSTS, AcceptNewPolicy, fingerprint, known_hosts_name
from .options import ConnectOptions
from .ssh import MAX_OUTPUT, CommandResult, OnStdout, Session, resolve_target
from .ssh_config import Target
from .ssh_loop import LoopClosed, SshLoop
from .stalls import HandshakeWatch, stalled

try:
    from ssh2 import exceptions as ssh2_errors
    from ssh2.error_codes import LIBSSH2_ERROR_EAGAIN
    from ssh2.session import LIBSSH2_METHOD_HOSTKEY
    from ssh2.session import Session as Ssh2Session
except ImportError:  # pragma: no cover - a declared dependency; without it, paramiko
    Ssh2Session = None

log = logging.getLogger("cargoship.planner")

_CHUNK = 65536


@dataclass(frozen=True)
class _Fast:
    """What a host's libssh2 handshake needs, worked out before its socket is there."""

    label: str
    endpoint: str  # as cluster.yaml names it, for messages
    target: Target
    key_path: Path
    known_hosts: Path
    known: dict[str, paramiko.PKey]  # known_hosts' keys for the host, by type
    peer: Peer


def start_fast(label: str, ssh: SshConfig, options: ConnectOptions,
               ) -> Future[Session | None] | None:
    """This host's handshake on the run's SSH loop, begun as soon as its TCP connection
    (reach.py) is up; None where this path does not apply (see the module docstring).
    The future's result is None when the key was refused here: ssh.py then tries."""
    if Ssh2Session is None or ssh.bastion is not None or ssh.key_path is None:
        return None
    target = resolve_target(ssh, options)
    key_path = ssh.key_path.expanduser()
    if not target.direct or options.keys.parsed(key_path) is None:
        return None  # a passphrase, a certificate, or a key paramiko cannot read
    known_hosts = (ssh.known_hosts or DEFAULT_KNOWN_HOSTS).expanduser()
    known: dict[str, paramiko.PKey] = {}
    if known_hosts.exists():
        try:
            known = options.known_hosts.lookup(
                known_hosts, known_hosts_name(target.host, target.port)) or {}
        except (OSError, paramiko.SSHException) as exc:
            raise ConnectError(label, f"cannot read known_hosts {known_hosts}: {exc}") from None
    fast = _Fast(label, ssh.endpoint, target, key_path, known_hosts, known,
                 host_peer(label, ssh.endpoint, known_hosts, ssh.key_path))
    outcome: Future[Session | None] = Future()

    def dialled(result: socket.socket | OSError) -> None:
        if isinstance(result, OSError):
            why = connect_failure(result, options.connect_timeout)
            outcome.set_exception(ConnectError(label, f"cannot connect to {ssh.endpoint}: {why}"))
            return
        _handshake_on_loop(fast, result, options, outcome)

    if not options.dialled.when_ready((target.host, target.port), dialled):
        return None  # not dialled ahead: ssh.py dials it
    return outcome


def _handshake_on_loop(fast: _Fast, sock: socket.socket, options: ConnectOptions,
                       outcome: Future[Session | None]) -> None:
    session = Ssh2Session()
    session.set_blocking(False)
    timeout = options.connect_timeout
    watch = HandshakeWatch()

    def expired() -> BaseException:
        # TCP connected already (reach.py): the SSH server stalled, at watch's stage.
        return ConnectError(fast.label, stalled(fast.endpoint, watch.stage(sock), timeout))

    def done(job: Future[Any]) -> None:
        exc = job.exception()
        if exc is None and job.result() is not None:
            log.debug("%s: connected over libssh2, host key %s", fast.label, job.result())
            outcome.set_result(Lite(fast.label, session, sock, fast.target.user,
                                    f"{fast.target.host}:{fast.target.port}", job.result(),
                                    options.loop))
            return
        sock.close()  # mid-handshake: nothing to say goodbye to
        if exc is None:
            outcome.set_result(None)  # the key was refused here: ssh.py tries
        elif isinstance(exc, ssh2_errors.SSH2Error):
            outcome.set_exception(ConnectError(fast.label, f"cannot connect to {fast.endpoint}: "
                                                           f"{_ssh2_failure(exc, timeout)}"))
        elif isinstance(exc, OSError):
            outcome.set_exception(ConnectError(fast.label, f"cannot connect to {fast.endpoint}: "
                                                           f"{connect_failure(exc, timeout)}"))
        else:
            outcome.set_exception(exc)

    options.loop.submit(sock, session, _handshake(fast, session, sock, options, watch),
                        timeout, expired).add_done_callback(done)


def _handshake(fast: _Fast, session: Any, sock: socket.socket, options: ConnectOptions,
               watch: HandshakeWatch) -> Generator[None, None, str | None]:
    """Key exchange, the host key checked, then the key offered: the host key's
    fingerprint, or None if the key was refused. `watch` follows how far it got."""
    session.method_pref(LIBSSH2_METHOD_HOSTKEY, ",".join(_host_key_order(fast.known)))
    while True:
        watch.look(sock)  # before libssh2 reads what came
        if session.handshake(sock) != LIBSSH2_ERROR_EAGAIN:
            break
        yield
    watch.kex_done = True
    blob, _ = session.hostkey()
    presented = _host_key(blob)
    if presented is None:
        raise ConnectError(fast.label, f"cannot connect to {fast.endpoint}: the host "
                                       "presented a host key that cannot be read")
    expected = fast.known.get(presented.get_name())
    if expected is None:
        if not options.accept_new_host_keys:
            raise unknown_key(fast.peer, fingerprint(presented))
        AcceptNewPolicy(fast.known_hosts, options.known_hosts_lock).record(
            known_hosts_name(fast.target.host, fast.target.port), presented)
    elif expected.asbytes() != blob:
        raise changed_key(fast.peer, fingerprint(expected), fingerprint(presented))
    try:
        while session.userauth_publickey_fromfile(
                fast.target.user, str(fast.key_path)) == LIBSSH2_ERROR_EAGAIN:
            yield
    except ssh2_errors.SSH2Error as exc:
        if not _auth_refused(exc):
            raise
        log.debug("%s: key %s refused over libssh2 (%s); trying through paramiko",
                  fast.label, fast.key_path, type(exc).__name__)
        return None
    return fingerprint(presented)


class Lite:
    """One libssh2 connection. Its commands run on the run's SSH loop (ssh_loop.py), and
    their output is read as it comes: stdout and stderr side by side (a command filling
    one cannot stall on the other), every wait bounded by the command's deadline."""

    def __init__(self, label: str, session: Any, sock: socket.socket, user: str,
                 endpoint: str, host_key_fingerprint: str, loop: SshLoop) -> None:
        self.label = label
        self.user = user
        self.endpoint = endpoint
        self.host_key_fingerprint = host_key_fingerprint
        self.round_trips = 0
        self._session = session
        self._sock = sock
        self._loop = loop
        self._closed = False

    def run(self, command: str, timeout: float, stdin: bytes | None = None,
            on_stdout: OnStdout | None = None,
            hold: Callable[[], bytes | None] | None = None) -> CommandResult:
        """As SshSession.run, for the planner's reads: no stdin, `on_stdout` or `hold`."""
        if stdin or on_stdout is not None or hold is not None:
            raise ValueError("a plan's libssh2 session only runs read commands")
        try:
            # The loop ends every job by its deadline; the margin is for a loop gone wrong.
            result: CommandResult = self.submit(command, timeout).result(timeout + 30)
        except FutureTimeout:
            self._abandon()
            raise CommandTimeout(self.label,
                                 f"remote command timed out after {timeout:g}s") from None
        return result

    def submit(self, command: str, timeout: float) -> Future[CommandResult]:
        """run() without waiting: the command's result (or its one-line error), later."""
        outcome: Future[CommandResult] = Future()
        if self._closed:
            outcome.set_exception(ConnectionLost(self.label, "SSH connection is closed"))
            return outcome
        self.round_trips += 1

        def expired() -> BaseException:
            return CommandTimeout(self.label, f"remote command timed out after {timeout:g}s")

        def done(job: Future[CommandResult]) -> None:
            exc = job.exception()
            if exc is None:
                outcome.set_result(job.result())
                return
            # Cut short, libssh2 is mid-call on this session: it is not used again.
            self._abandon()
            if isinstance(exc, CommandError):
                outcome.set_exception(exc)
            elif isinstance(exc, (ssh2_errors.SSH2Error, LoopClosed)):
                outcome.set_exception(ConnectionLost(
                    self.label, f"SSH connection lost: {_ssh2_name(exc)}"))
            elif isinstance(exc, OSError):
                outcome.set_exception(ConnectionLost(self.label, f"SSH connection lost: {exc}"))
            else:
                outcome.set_exception(exc)

        self._loop.submit(self._sock, self._session, self._exec(command), timeout,
                          expired).add_done_callback(done)
        return outcome

    def _exec(self, command: str) -> Generator[None, None, CommandResult]:
        session = self._session
        while (channel := session.open_session()) == LIBSSH2_ERROR_EAGAIN:
            yield
        while channel.execute(command) == LIBSSH2_ERROR_EAGAIN:
            yield
        while channel.send_eof() == LIBSSH2_ERROR_EAGAIN:
            yield
        out, err = bytearray(), bytearray()
        while True:
            got = False
            for read, into in ((channel.read, out), (channel.read_stderr, err)):
                size, data = read(_CHUNK)
                if size > 0:
                    got = True
                    into += data
                elif size < 0 and size != LIBSSH2_ERROR_EAGAIN:
                    raise ConnectionLost(self.label,
                                         f"SSH connection lost (libssh2 error {size})")
            if len(out) + len(err) > MAX_OUTPUT:
                raise CommandError(self.label,
                                   f"remote output exceeded {MAX_OUTPUT >> 20} MiB")
            if got:
                continue
            if channel.eof():
                break
            # The stderr read may have taken stdout's next packet off the socket (libssh2
            # queues what it reads by stream): the socket then stays quiet however long
            # the loop waits on it. Anything queued for this channel is read first.
            if channel.poll_channel_read(1):
                continue
            yield
        while channel.wait_closed() == LIBSSH2_ERROR_EAGAIN:
            yield
        return CommandResult(channel.get_exit_status(), bytes(out), bytes(err))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _close(self._session, self._sock)

    def _abandon(self) -> None:
        """Close without a goodbye: the session may be mid-call, or its peer gone."""
        self._closed = True
        self._sock.close()


def _close(session: Any, sock: socket.socket) -> None:
    try:
        session.set_blocking(True)
        session.set_timeout(1000)
        session.disconnect()
    except Exception as exc:  # noqa: BLE001 - closing a connection that may be gone already
        log.debug("libssh2 disconnect: %s", _ssh2_name(exc))
    sock.close()


def _host_key_order(known: dict[str, paramiko.PKey]) -> list[str]:
    """paramiko's host key algorithms in its order, the first type known_hosts has for the
    host moved first (what SSHClient.connect does), limited to what libssh2 offers."""
    order = list(PARAMIKO_HOST_KEY_ORDER)
    first = next(iter(known), None)
    if first is not None:
        wanted = ["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"] if first == "ssh-rsa" else [first]
        order = wanted + [kind for kind in order if kind not in wanted]
    return [kind for kind in order if kind in _LIBSSH2_HOST_KEYS]


# paramiko 3's Transport._preferred_keys (a unit test holds the two together).
PARAMIKO_HOST_KEY_ORDER = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
                           "ecdsa-sha2-nistp521", "rsa-sha2-512", "rsa-sha2-256", "ssh-rsa",
                           "ssh-dss")
# libssh2 1.11's host key algorithms without certificates (cargoship never asks for one).
_LIBSSH2_HOST_KEYS = frozenset({"ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
                                "ecdsa-sha2-nistp521", "rsa-sha2-512", "rsa-sha2-256",
                                "ssh-rsa"})


def _host_key(blob: bytes) -> paramiko.PKey | None:
    """The key a host presented, from its wire blob (which starts with its type's name)."""
    size = int.from_bytes(blob[:4], "big")
    try:
        return paramiko.PKey.from_type_string(blob[4:4 + size].decode("ascii"), blob)
    except Exception:  # noqa: BLE001 - paramiko's key classes raise several kinds
        return None


def _auth_refused(exc: BaseException) -> bool:
    return isinstance(exc, (ssh2_errors.AuthenticationError, ssh2_errors.PublicKeyError,
                            ssh2_errors.PublickeyUnverifiedError,
                            ssh2_errors.PublicKeyInitError, ssh2_errors.FileError,
                            ssh2_errors.MethodNoneError))


def _ssh2_name(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _ssh2_failure(exc: BaseException, timeout: float) -> str:
    if isinstance(exc, ssh2_errors.Timeout):
        return connect_failure(TimeoutError(), timeout)
    if isinstance(exc, (ssh2_errors.SocketDisconnectError, ssh2_errors.SocketRecvError,
                        ssh2_errors.BannerRecvError)):
        return "the host closed the connection during the SSH handshake"
    if isinstance(exc, (ssh2_errors.KexFailureError, ssh2_errors.KeyExchangeError,
                        ssh2_errors.MethodNotSupported, ssh2_errors.AlgoUnsupportedError)):
        return "no key exchange, cipher or host key algorithm in common with the host"
    return f"SSH handshake failed ({_ssh2_name(exc)})"

