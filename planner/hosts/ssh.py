"""SSH sessions to hosts, for plan and apply alike: libssh2 (ssh2-python) on the run's one
event loop (loop.py), with ~/.ssh/config resolved by ssh_config.py.

A session is one libssh2 connection; each command runs on a channel of its own
(channel.py), and several may run at once (wire.py). Where the connection goes is
ssh_config.py's, gateways (bastions, ProxyJump, ProxyCommand) are gateways.py's, and the
handshake, host key and credential rules are handshake.py's. Sessions are used from plain
threads: run() hands the loop a coroutine and waits for it.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Future
from typing import Any, Protocol

from ssh2 import exceptions as ssh2_errors
from ssh2.session import Session as Ssh2Session

from ..config.model import SshConfig
from ..errors import CommandError, ConnectError, ConnectionLost, HostKeyError
from .channel import ABANDONED, ChannelCommand, CommandResult, Hold, OnStdout, Sink
from .dial import dial
from .handshake import Checks, connect_failure, host_peer, shake, ssh2_name
from .host_keys import DEFAULT_KNOWN_HOSTS, fingerprint, known_hosts_name
from .loop import LoopClosed, SshLoop
from .options import ConnectOptions
from .ssh_config import Target
from .wire import Wire

__all__ = ["ABANDONED", "CommandResult", "ConnectOptions", "OnStdout", "Session", "SshSession",
           "open_session"]

log = logging.getLogger("cargoship.planner")


class Session(Protocol):
    """What the host layer's users need of a session (SshSession; fakes in tests)."""

    label: str
    user: str
    endpoint: str
    host_key_fingerprint: str
    round_trips: int

    def run(self, command: str, timeout: float, stdin: bytes | None = None,
            on_stdout: OnStdout | None = None, hold: Hold | None = None,
            sink: Sink | None = None) -> CommandResult: ...

    def close(self) -> None: ...


class SshSession:
    """One open SSH connection. Any thread may run commands on it, several at once."""

    def __init__(self, label: str, wire: Wire, target: Target, host_key_fingerprint: str,
                 loop: SshLoop) -> None:
        self.label = label
        # As resolved through ~/.ssh/config: what was really used.
        self.user: str = target.user
        self.endpoint = f"{target.host}:{target.port}"
        self.host_key_fingerprint = host_key_fingerprint
        self.round_trips = 0
        self._wire = wire
        self._loop = loop
        self._closed = False

    def run(self, command: str, timeout: float, stdin: bytes | None = None,
            on_stdout: OnStdout | None = None, hold: Hold | None = None,
            sink: Sink | None = None) -> CommandResult:
        """Run one command. Data such as file content goes through `stdin`, never the
        command line, which other users of the host can read in the process list.
        `on_stdout` is handed stdout as it arrives (and b"" after each 0.2 s of silence);
        when it returns False the command is abandoned (its channel closed) and the
        result has exit code ABANDONED. `hold`, when given, is called in a thread of its
        own once `stdin` is sent, again and again until it returns None; it may block,
        and what it returns is sent as it comes. Then stdin is closed and `timeout`
        counts from there. Output is read (and handed to `on_stdout`) meanwhile, so a
        held command can say how far it got. A `sink` keeps what it chooses of stdout
        (batch.Sections)."""
        try:
            return self._loop.call(self._command(command, timeout, stdin, on_stdout, hold,
                                                 sink))
        except LoopClosed:
            raise ConnectionLost(self.label, "SSH connection lost: the run's SSH "
                                             "connections were closed") from None

    def submit(self, command: str, timeout: float,
               sink: Sink | None = None) -> Future[CommandResult]:
        """run() without waiting (no stdin): the command's result or its one-line error."""
        return self._loop.submit(self._command(command, timeout, None, None, None, sink))

    async def _command(self, command: str, timeout: float, stdin: bytes | None,
                       on_stdout: OnStdout | None, hold: Hold | None,
                       sink: Sink | None = None) -> CommandResult:
        if self._closed:
            raise ConnectionLost(self.label, "SSH connection is closed")
        self.round_trips += 1
        try:
            return await ChannelCommand(self.label, self._wire, timeout, on_stdout,
                                        sink).run(command, stdin, hold)
        except CommandError:
            if self._wire.jammed:
                self._abandon()  # no command could open a channel on it for a while
            raise
        except OSError as exc:
            self._abandon()
            raise ConnectionLost(self.label, f"SSH connection lost: {exc}") from None
        except ssh2_errors.SSH2Error as exc:
            self._abandon()
            raise ConnectionLost(self.label, f"SSH connection lost: {ssh2_name(exc)}") from None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._loop.call(_goodbye(self._wire))
        except Exception as exc:  # noqa: BLE001 - closing a connection that may be gone
            log.debug("%s: closing: %s", self.label, exc)
            self._wire.shut()

    def _abandon(self) -> None:
        """Close without a goodbye: the session may be mid-call, or its peer gone."""
        self._closed = True
        self._wire.shut()


async def _goodbye(wire: Wire) -> None:
    try:
        async with asyncio.timeout(1):
            await wire.call(wire.session.disconnect)
    except (TimeoutError, ssh2_errors.SSH2Error, OSError):
        pass  # a goodbye nobody hears changes nothing
    finally:
        wire.shut()


def resolve_target(ssh: SshConfig, options: ConnectOptions) -> Target:
    return options.ssh_config.resolve(ssh.address, ssh.port, ssh.user,
                                      (str(ssh.key_path),) if ssh.key_path else ())


async def connect(label: str, ssh: SshConfig, options: ConnectOptions,
                  pinned: str | None = None,
                  handshakes: asyncio.Semaphore | None = None) -> SshSession:
    """A session to a cluster host, on the run's loop. The TCP connection (or the gateway
    channel) is made at once; the handshake waits for `handshakes` when given."""
    known_hosts = (ssh.known_hosts or DEFAULT_KNOWN_HOSTS).expanduser()
    target = resolve_target(ssh, options)
    if pinned is not None and not _pinnable(options, known_hosts, target, pinned):
        raise HostKeyError(label, f"{known_hosts} has no key for {ssh.endpoint} matching the "
                                  f"one the plan was made against {pinned}: refusing before "
                                  "connecting (re-plan if the host was rebuilt)")
    sock, proxied = await _socket(label, ssh, target, options)
    wire = None
    try:
        session = Ssh2Session()
        session.set_blocking(False)
        wire = Wire(session, sock)
        peer = host_peer(label, ssh.endpoint, known_hosts, ssh.key_path)
        checks = Checks(pinned, options.accept_new_host_keys and pinned is None)
        if handshakes is None:
            shown = await shake(wire, target, peer, options, checks, proxied)
        else:
            async with handshakes:
                shown = await shake(wire, target, peer, options, checks, proxied)
    except BaseException:
        if wire is not None:  # unwatched first, as gateways._open_gateway says why
            wire.shut()
        else:
            sock.close()
        raise
    log.debug("%s: connected, host key %s", label, shown)
    return SshSession(label, wire, target, shown, options.loop)


async def _socket(label: str, ssh: SshConfig, target: Target,
                  options: ConnectOptions) -> tuple[Any, bool]:
    """The connection's socket, and whether it is a ProxyCommand's."""
    if ssh.bastion is not None:
        return await options.gateways.bastion(label, ssh, options, target.host,
                                              target.port), False
    if not target.direct:
        return await options.gateways.socket_for(label, target, (
            ssh.known_hosts or DEFAULT_KNOWN_HOSTS).expanduser(), options)
    try:
        return await dial(target.host, target.port, options.connect_timeout), False
    except OSError as exc:
        raise ConnectError(label, f"cannot connect to {ssh.endpoint}: "
                                  f"{connect_failure(exc, options.connect_timeout)}") from None


def _pinnable(options: ConnectOptions, known_hosts: Any, target: Target, pinned: str) -> bool:
    if not known_hosts.exists():
        return False
    keys = options.known_hosts.lookup(known_hosts, known_hosts_name(target.host, target.port))
    return any(fingerprint(key) == pinned for key in (keys or {}).values())


def open_session(label: str, ssh: SshConfig, options: ConnectOptions,
                 pinned: str | None = None) -> SshSession:
    """`pinned`: the only host key fingerprint to accept (apply: the plan's), checked
    before authenticating, so a host presenting any other key never sees a login."""
    try:
        return options.loop.call(connect(label, ssh, options, pinned))
    except LoopClosed:
        raise ConnectError(label, "the run's SSH connections were closed") from None
