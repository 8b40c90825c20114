"""SSH sessions to hosts: paramiko directly, with ~/.ssh/config resolved by ssh_config.py.

A session is one SSHClient; commands run on channels of its transport. Host keys are
checked by host_keys.py's policies (never paramiko's accept-anything default), gateways
(bastions, ProxyJump, ProxyCommand) are gateways.py's, and a handshake's failure is
explained by handshake.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import paramiko

from ..config.model import SshConfig
from ..errors import CommandError, CommandTimeout, ConnectError, ConnectionLost, HostKeyError
from .handshake import Sock, connect_failure, handshake, host_peer
from .host_keys import (
    DEFAULT_KNOWN_HOSTS,
    AcceptNewPolicy,
    StrictPolicy,
    fingerprint,
    known_hosts_name,
    pin,
)
from .options import ConnectOptions
from .ssh_config import Target

__all__ = ["ABANDONED", "CommandResult", "ConnectOptions", "OnStdout", "Session", "SshSession",
           "direct_endpoint", "open_session"]

MAX_OUTPUT = 16 << 20  # bytes per command; a host that sends more is lying or broken
# The exit code of a command whose output the caller stopped reading (run's on_stdout).
ABANDONED = -2
OnStdout = Callable[[bytes], bool]


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    stdout: bytes
    stderr: bytes


class Session(Protocol):
    """What the host layer's users need of a session: SshSession here, or a plan's
    libssh2 session (libssh2.py), which has no `hold`."""

    label: str
    user: str
    endpoint: str
    host_key_fingerprint: str
    round_trips: int

    def run(self, command: str, timeout: float, stdin: bytes | None = None,
            on_stdout: OnStdout | None = None,
            hold: Callable[[], bytes | None] | None = None) -> CommandResult: ...

    def close(self) -> None: ...


class SshSession:
    """One open SSH connection. Thread-safe for sequential use by one phase at a time."""

    def __init__(self, label: str, client: paramiko.SSHClient, target: Target,
                 host_key: paramiko.PKey) -> None:
        self.label = label
        self._client = client
        # As resolved through ~/.ssh/config: what was really used.
        self.user: str = target.user
        self.endpoint = f"{target.host}:{target.port}"
        self.host_key_fingerprint = fingerprint(host_key)
        self.round_trips = 0

    def run(self, command: str, timeout: float, stdin: bytes | None = None,
            on_stdout: OnStdout | None = None,
            hold: Callable[[], bytes | None] | None = None) -> CommandResult:
        """Run one command. Data such as file content goes through `stdin`, never the
        command line, which other users of the host can read in the process list.
        `on_stdout` is handed stdout as it arrives; when it returns False the command is
        abandoned (its channel closed) and the result has exit code ABANDONED.
        `hold`, when given, is called in a thread of its own once `stdin` is sent, again
        and again until it returns None; it may block, and what it returns is sent as it
        comes. Then stdin is closed and `timeout` counts from there. Output is read (and
        handed to `on_stdout`) meanwhile, so a held command can say how far it got."""
        transport = self._client.get_transport()
        if transport is None or not transport.is_active():
            raise ConnectionLost(self.label, "SSH connection is closed")
        self.round_trips += 1
        try:
            channel = transport.open_session(timeout=timeout)
            try:
                channel.exec_command(command)
                _send(channel, transport, stdin)
                if hold is None:
                    if not channel.closed:
                        channel.shutdown_write()
                    return _collect(self.label, channel, timeout, on_stdout)
                released = _Release(channel, transport, hold)
                return _collect(self.label, channel, timeout, on_stdout, released)
            finally:
                channel.close()
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise ConnectionLost(self.label,
                                 f"SSH connection lost: {exc or type(exc).__name__}") from None

    def close(self) -> None:
        self._client.close()


def _send(channel: paramiko.Channel, transport: paramiko.Transport,
          data: bytes | None) -> None:
    if not data:
        return
    try:
        channel.sendall(data)
    except OSError:
        # The command ended without reading all of its input (a lock found held, a
        # refusal): the channel is closed, the connection is not. Its exit status and
        # output say what happened.
        if not transport.is_active():
            raise


class _Release:
    """The rest of a held command's stdin, sent from a thread of its own as `hold` returns
    it, while the command's output is read; `at` is when stdin was closed (the timeout's
    start)."""

    def __init__(self, channel: paramiko.Channel, transport: paramiko.Transport,
                 hold: Callable[[], bytes | None]) -> None:
        self.at: float | None = None
        self._channel, self._transport, self._hold = channel, transport, hold
        threading.Thread(target=self._run, name="cargoship-hold", daemon=True).start()

    def _run(self) -> None:
        try:
            while (data := self._hold()) is not None and not self._channel.closed:
                _send(self._channel, self._transport, data)
            if not self._channel.closed:
                self._channel.shutdown_write()
        except (paramiko.SSHException, OSError, EOFError):
            pass  # the reading side hears of a connection that is gone
        finally:
            self.at = time.monotonic()


def _collect(label: str, channel: paramiko.Channel, timeout: float,
             on_stdout: OnStdout | None = None,
             released: _Release | None = None) -> CommandResult:
    """Read stdout and stderr until the command's EOF, then wait for its exit status.

    Waits block (on the channel until data or EOF, then an event for the exit status):
    once EOF has arrived the channel stays readable, so polling select() past it spun
    until the exit status came, ~80 wake-ups per command fighting the transport thread
    for the GIL (~4 ms CPU per command, most of a plan's CPU with hundreds of hosts).
    """
    start = time.monotonic()
    out, err = bytearray(), bytearray()

    def deadline() -> float:
        # A held command has all the time it is held: its timeout counts from the release.
        if released is None:
            return start + timeout
        return float("inf") if released.at is None else released.at + timeout

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
        remaining = deadline() - time.monotonic()
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
    if not channel.status_event.wait(max(0.0, min(deadline(), time.monotonic() + timeout)
                                          - time.monotonic())):
        raise CommandTimeout(label, f"remote command timed out after {timeout:g}s")
    status = channel.recv_exit_status()
    if status == -1:
        # paramiko's value when the channel closed without an exit status: the server side
        # went away mid-command, so whether the command ran (in full) is unknown.
        raise ConnectionLost(label, "SSH connection lost before the command finished")
    return CommandResult(status, bytes(out), bytes(err))


def resolve_target(ssh: SshConfig, options: ConnectOptions) -> Target:
    return options.ssh_config.resolve(ssh.address, ssh.port, ssh.user,
                                      (str(ssh.key_path),) if ssh.key_path else ())


def direct_endpoint(ssh: SshConfig, options: ConnectOptions) -> tuple[str, int] | None:
    """Where a host's TCP connection goes, as ~/.ssh/config resolves it; None when it goes
    through a bastion or a ProxyJump/ProxyCommand (those dial for themselves)."""
    if ssh.bastion is not None:
        return None
    target = resolve_target(ssh, options)
    return (target.host, target.port) if target.direct else None


def open_session(label: str, ssh: SshConfig, options: ConnectOptions,
                 pinned: str | None = None) -> SshSession:
    """`pinned`: the only host key fingerprint to accept (apply: the plan's), checked
    before authenticating, so a host presenting any other key never sees a login."""
    known_hosts = (ssh.known_hosts or DEFAULT_KNOWN_HOSTS).expanduser()
    target = resolve_target(ssh, options)
    client = paramiko.SSHClient()
    if known_hosts.exists():
        try:
            # The name paramiko looks up: the host as resolved through ~/.ssh/config.
            options.known_hosts.trust(client, known_hosts, target.host, target.port)
        except (OSError, paramiko.SSHException) as exc:
            raise ConnectError(label, f"cannot read known_hosts {known_hosts}: {exc}") from None
    if pinned is not None and not pin(client, known_hosts_name(target.host, target.port),
                                      pinned):
        raise HostKeyError(label, f"{known_hosts} has no key for {ssh.endpoint} matching the "
                                  f"one the plan was made against {pinned}: refusing before "
                                  "connecting (re-plan if the host was rebuilt)")
    client.set_missing_host_key_policy(
        AcceptNewPolicy(known_hosts, options.known_hosts_lock)
        if options.accept_new_host_keys else StrictPolicy()
    )

    def sock() -> Sock | None:
        if ssh.bastion is not None:
            return options.gateways.channel(label, ssh, options, target.host, target.port)
        if not target.direct:
            return options.gateways.socket_for(label, target, known_hosts, options)
        dialled = options.dialled.take((target.host, target.port), options.connect_timeout + 5)
        if isinstance(dialled, OSError):
            raise ConnectError(label, f"cannot connect to {ssh.endpoint}: "
                                      f"{connect_failure(dialled, options.connect_timeout)}")
        return dialled

    peer = host_peer(label, ssh.endpoint, known_hosts, ssh.key_path)
    transport = handshake(client, target, sock, peer, options)
    return SshSession(label, client, target, transport.get_remote_server_key())
