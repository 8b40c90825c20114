"""SSH sessions to hosts, for plan and apply alike: libssh2 (ssh2-python) on the run's one
event loop (loop.py), with ~/.ssh/config resolved by ssh_config.py.

A session is one libssh2 connection; each command runs on a channel of its own, and
several may run at once (wire.py). Where the connection goes is ssh_config.py's, gateways
(bastions, ProxyJump, ProxyCommand) are gateways.py's, and the handshake, host key and
credential rules are handshake.py's. Sessions are used from plain threads: run() hands
the loop a coroutine and waits for it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

from ssh2 import exceptions as ssh2_errors
from ssh2.session import Session as Ssh2Session

from ..config.model import SshConfig
from ..errors import CommandError, CommandTimeout, ConnectError, ConnectionLost, HostKeyError
from .dial import dial
from .handshake import Checks, connect_failure, host_peer, shake, ssh2_name
from .host_keys import DEFAULT_KNOWN_HOSTS, fingerprint, known_hosts_name
from .loop import LoopClosed, SshLoop
from .options import ConnectOptions
from .ssh_config import Target
from .wire import EAGAIN, Wire

__all__ = ["ABANDONED", "CommandResult", "ConnectOptions", "OnStdout", "Session", "SshSession",
           "open_session"]

log = logging.getLogger("cargoship.planner")

MAX_OUTPUT = 16 << 20  # bytes per command; a host that sends more is lying or broken
# The exit code of a command whose output the caller stopped reading (run's on_stdout).
ABANDONED = -2
OnStdout = Callable[[bytes], bool]
Hold = Callable[[], "bytes | None"]
_CHUNK = 65536
_IDLE = 0.2  # a command silent this long asks on_stdout (with b"") whether to go on


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    stdout: bytes
    stderr: bytes


class Session(Protocol):
    """What the host layer's users need of a session (SshSession; fakes in tests)."""

    label: str
    user: str
    endpoint: str
    host_key_fingerprint: str
    round_trips: int

    def run(self, command: str, timeout: float, stdin: bytes | None = None,
            on_stdout: OnStdout | None = None, hold: Hold | None = None) -> CommandResult: ...

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
            on_stdout: OnStdout | None = None, hold: Hold | None = None) -> CommandResult:
        """Run one command. Data such as file content goes through `stdin`, never the
        command line, which other users of the host can read in the process list.
        `on_stdout` is handed stdout as it arrives (and b"" after each 0.2 s of silence);
        when it returns False the command is abandoned (its channel closed) and the
        result has exit code ABANDONED. `hold`, when given, is called in a thread of its
        own once `stdin` is sent, again and again until it returns None; it may block,
        and what it returns is sent as it comes. Then stdin is closed and `timeout`
        counts from there. Output is read (and handed to `on_stdout`) meanwhile, so a
        held command can say how far it got."""
        try:
            return self._loop.call(self._command(command, timeout, stdin, on_stdout, hold))
        except LoopClosed:
            raise ConnectionLost(self.label, "SSH connection lost: the run's SSH "
                                             "connections were closed") from None

    def submit(self, command: str, timeout: float) -> Future[CommandResult]:
        """run() without waiting (no stdin): the command's result or its one-line error."""
        return self._loop.submit(self._command(command, timeout, None, None, None))

    async def _command(self, command: str, timeout: float, stdin: bytes | None,
                       on_stdout: OnStdout | None, hold: Hold | None) -> CommandResult:
        if self._closed:
            raise ConnectionLost(self.label, "SSH connection is closed")
        self.round_trips += 1
        try:
            return await _Exec(self.label, self._wire, timeout, on_stdout).run(
                command, stdin, hold)
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


class _Abandoned(Exception):
    """on_stdout said to stop listening."""


class _Exec:
    """One command on its own channel: stdin sent while output is read (a command that
    stops reading its input, or fills stdout or stderr, stalls nothing), every wait
    bounded by its deadline."""

    def __init__(self, label: str, wire: Wire, timeout: float,
                 on_stdout: OnStdout | None) -> None:
        self.label, self.wire, self.timeout, self.on_stdout = label, wire, timeout, on_stdout
        self.released: float | None = None  # when stdin was closed: the timeout's start
        self.started = time.monotonic()
        self.out, self.err = bytearray(), bytearray()
        self._pulling = asyncio.Lock()  # output reaches on_stdout in order

    def deadline(self, held: bool) -> float:
        if not held:
            return self.started + self.timeout
        return float("inf") if self.released is None else self.released + self.timeout

    def timed_out(self) -> CommandTimeout:
        return CommandTimeout(self.label, f"remote command timed out after {self.timeout:g}s")

    def result(self, code: int) -> CommandResult:
        return CommandResult(code, bytes(self.out), bytes(self.err))

    async def run(self, command: str, stdin: bytes | None, hold: Hold | None) -> CommandResult:
        wire = self.wire
        held = hold is not None
        channel = await self._start(command)
        holding: asyncio.Task[None] | None = None
        try:
            try:
                async with asyncio.timeout_at(_loop_time(self.deadline(False))):
                    if stdin:
                        await self.send(channel, stdin)
            except TimeoutError:
                raise self.timed_out() from None
            if hold is None:
                await self.end_input(channel)
            else:
                holding = asyncio.create_task(self.hold(channel, hold))
            return await self.collect(channel, held)
        except _Abandoned:
            return self.result(ABANDONED)
        finally:
            if holding is not None:
                holding.cancel()
            if not channel.eof():
                _close_channel(channel)
            wire.nudge()

    async def _start(self, command: str) -> Any:
        wire = self.wire
        try:
            channel = await wire.open(wire.session.open_session, timeout=self.timeout)
        except TimeoutError:
            raise self.timed_out() from None
        try:
            async with asyncio.timeout_at(_loop_time(self.deadline(False))):
                await wire.call(channel.execute, command)
        except TimeoutError:
            _close_channel(channel)
            raise self.timed_out() from None
        return channel

    async def send(self, channel: Any, data: bytes) -> None:
        """Write `data` to the command's stdin, reading its output meanwhile. A command
        that ended without reading all of it (a lock found held, a refusal) ends the
        sending: its exit status and output say what happened."""
        view = memoryview(data)
        while view and not channel.eof():
            try:
                code, sent = channel.write(bytes(view[:_CHUNK]))
            except (ssh2_errors.ChannelError, ssh2_errors.ChannelClosedError,
                    ssh2_errors.ChannelEOFSentError):
                return
            self.wire.nudge()
            view = view[sent:]
            if code == EAGAIN:
                # The window is shut until the command reads: its output, and its EOF if
                # it ends without reading, come meanwhile.
                if await self.pull(channel):
                    continue
                await self.wire.wait(ready=lambda: bool(
                    channel.window_write() > 0 or _queued(channel)))

    async def end_input(self, channel: Any) -> None:
        try:
            await self.wire.call(channel.send_eof)
        except (ssh2_errors.ChannelError, ssh2_errors.ChannelClosedError,
                ssh2_errors.ChannelEOFSentError):
            pass  # the command closed its side first
        self.released = time.monotonic()

    async def hold(self, channel: Any, hold: Hold) -> None:
        loop = asyncio.get_running_loop()
        try:
            while (data := await loop.run_in_executor(None, hold)) is not None:
                if channel.eof():
                    break
                await self.send(channel, data)
            await self.end_input(channel)
        finally:
            if self.released is None:
                self.released = time.monotonic()

    async def pull(self, channel: Any) -> bool:
        """Read what stdout and stderr have now (stdout handed to on_stdout); whether
        anything came. _Abandoned when on_stdout says stop."""
        async with self._pulling:
            got = False
            for read, into in ((channel.read, self.out), (channel.read_stderr, self.err)):
                size, data = read(_CHUNK)
                if size > 0:
                    got = True
                    into += data
                    if into is self.out and self.on_stdout is not None and not \
                            await asyncio.get_running_loop().run_in_executor(
                                None, self.on_stdout, data):
                        raise _Abandoned
                elif size < 0 and size != EAGAIN:
                    raise ConnectionLost(self.label,
                                         f"SSH connection lost (libssh2 error {size})")
            self.wire.nudge()
            if len(self.out) + len(self.err) > MAX_OUTPUT:
                raise CommandError(self.label,
                                   f"remote output exceeded {MAX_OUTPUT >> 20} MiB")
            return got

    async def collect(self, channel: Any, held: bool) -> CommandResult:
        """Read stdout and stderr until the command's EOF, then its exit status."""
        wire = self.wire
        quiet_since = time.monotonic()
        while True:
            got = await self.pull(channel)
            now = time.monotonic()
            if got:
                quiet_since = now
                continue
            if channel.eof():
                break
            if self.on_stdout is not None and now - quiet_since >= _IDLE:
                quiet_since = now
                # No output for a while: the caller may have stopped listening meanwhile.
                if not await asyncio.get_running_loop().run_in_executor(
                        None, self.on_stdout, b""):
                    raise _Abandoned
            left = self.deadline(held) - now
            if left <= 0:
                raise self.timed_out()
            await wire.wait(ready=lambda: _queued(channel), at_most=min(left, _IDLE))
        try:
            async with asyncio.timeout(max(0.0, min(self.deadline(held) - time.monotonic(),
                                                    self.timeout))):
                await wire.call(channel.wait_closed)
        except TimeoutError:
            raise self.timed_out() from None
        _, signal, _, _ = channel.get_exit_signal()
        if signal:
            # The command was killed (or the server side of it went away) mid-command:
            # whether it ran (in full) is unknown.
            raise ConnectionLost(self.label, "SSH connection lost before the command finished")
        return self.result(channel.get_exit_status())


def _queued(channel: Any) -> bool:
    """Output or EOF waiting in libssh2's queue for this channel."""
    return bool(channel.poll_channel_read(0) or channel.poll_channel_read(1) or channel.eof())


def _close_channel(channel: Any) -> None:
    try:
        channel.close()  # non-blocking: what is not sent now goes with the next call
    except ssh2_errors.SSH2Error:
        pass


def _loop_time(monotonic_deadline: float) -> float:
    """A time.monotonic() deadline on the running loop's clock."""
    loop = asyncio.get_running_loop()
    return loop.time() + (monotonic_deadline - time.monotonic())


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
