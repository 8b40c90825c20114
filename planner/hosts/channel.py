"""One command on one channel of an SSH connection (wire.py): stdin sent while stdout and
stderr are read, output handed on as it comes, every wait bounded by the command's deadline.
ssh.py's sessions run each command through ChannelCommand.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ssh2 import exceptions as ssh2_errors

from ..errors import CommandError, CommandTimeout, ConnectionLost
from .wire import EAGAIN, Wire

MAX_OUTPUT = 16 << 20  # bytes per command; a host that sends more is lying or broken
# Bytes a command may send in all where a Sink keeps only some of them: the rest is read
# and dropped, up to this; then the command is ended (its channel closed).
MAX_RECEIVED = 64 << 20
# The exit code of a command whose output the caller stopped reading (run's on_stdout).
ABANDONED = -2
OnStdout = Callable[[bytes], bool]
Hold = Callable[[], "bytes | None"]
_CHUNK = 65536
_IDLE = 0.2  # a command silent this long asks on_stdout (with b"") whether to go on
# libssh2 refuses to send a packet over its MAX_SSH_PACKET_LEN (35000 bytes, transport.c),
# and an exec request carries the whole command: a longer one (a snapshot reading many
# charts' files) failed with InvalidRequestError and lost the connection. Longer commands
# go as the first bytes of stdin instead (as_exec).
EXEC_LIMIT = 32768


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    stdout: bytes
    stderr: bytes


class Sink(Protocol):
    """Keeps what it chooses of a command's stdout (batch.Sections: each fact's part to its
    limit)."""

    kept: bytearray

    def feed(self, data: bytes) -> None: ...

    def end(self) -> bytes: ...

    def where(self) -> str: ...


class _Abandoned(Exception):
    """on_stdout said to stop listening."""


class ChannelCommand:
    """One command on its own channel: stdin sent while output is read (a command that
    stops reading its input, or fills stdout or stderr, stalls nothing), every wait
    bounded by its deadline."""

    def __init__(self, label: str, wire: Wire, timeout: float,
                 on_stdout: OnStdout | None, sink: Sink | None = None) -> None:
        self.label, self.wire, self.timeout, self.on_stdout = label, wire, timeout, on_stdout
        self.sink = sink
        self.received = 0
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
        out = self.sink.end() if self.sink is not None else bytes(self.out)
        return CommandResult(code, out, bytes(self.err))

    async def run(self, command: str, stdin: bytes | None, hold: Hold | None) -> CommandResult:
        wire = self.wire
        held = hold is not None
        command, stdin = as_exec(command, stdin)
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
            # A packet of this channel's left half sent (a write, a read's window adjust)
            # is finished; then the channel is closed now, not when the object is
            # collected: libssh2 would then send the close on its own, and could leave it
            # half sent with nobody to finish it.
            wire.settle(channel)
            wire.call_soon(channel.close)

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
            wire.settle(channel)
            wire.call_soon(channel.close)
            raise self.timed_out() from None
        return channel

    async def send(self, channel: Any, data: bytes) -> None:
        """Write `data` to the command's stdin, reading its output meanwhile. A command
        that ended without reading all of it (a lock found held, a refusal) ends the
        sending: its exit status and output say what happened."""
        view = memoryview(data)
        half_sent = False
        while view and (half_sent or not channel.eof()):
            chunk = bytes(view[:_CHUNK])
            try:
                code, sent = self.wire.attempt(channel.write, chunk)
            except (ssh2_errors.ChannelError, ssh2_errors.ChannelClosedError,
                    ssh2_errors.ChannelEOFSentError):
                return
            self.wire.nudge()
            view = view[sent:]
            half_sent = code == EAGAIN and self.wire.half_sent()
            if half_sent:
                # Even if the command has ended: nothing else goes out on this connection
                # (our EOF, other commands) until this write is made again and finishes
                # (by the wire, if this sender is cancelled first: run()'s settle).
                await self.wire.wait()
            elif code == EAGAIN or sent == 0:
                # The window is shut until the command reads: its output, and its EOF if
                # it ends without reading, come meanwhile. (libssh2 answers 0, not EAGAIN,
                # when its drain read found nothing whole and the window is still shut,
                # channel.c _libssh2_channel_write: made again at once, that would spin.)
                if await self.pull(channel):
                    continue
                await self.wire.wait(ready=lambda: bool(
                    channel.window_write() > 0 or _queued(channel)))

    async def end_input(self, channel: Any) -> None:
        try:
            async with asyncio.timeout(self.timeout):
                await self.wire.call(channel.send_eof)
        except (ssh2_errors.ChannelError, ssh2_errors.ChannelClosedError,
                ssh2_errors.ChannelEOFSentError):
            pass  # the command closed its side first
        except TimeoutError:
            raise self.timed_out() from None
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
                size, data = self.wire.attempt(read, _CHUNK)
                if size > 0:
                    got = True
                    self.received += size
                    if into is self.out and self.sink is not None:
                        self.sink.feed(data)
                    else:
                        into += data
                    if into is self.out and self.on_stdout is not None and not \
                            await asyncio.get_running_loop().run_in_executor(
                                None, self.on_stdout, data):
                        raise _Abandoned
                elif size < 0 and size != EAGAIN:
                    raise ConnectionLost(self.label,
                                         f"SSH connection lost (libssh2 error {size})")
            self.wire.nudge()
            kept = len(self.out if self.sink is None else self.sink.kept) + len(self.err)
            if kept > MAX_OUTPUT or self.received > MAX_RECEIVED:
                limit = MAX_OUTPUT if kept > MAX_OUTPUT else MAX_RECEIVED
                where = "" if self.sink is None else f" ({self.sink.where()})"
                raise CommandError(self.label,
                                   f"remote output exceeded {limit >> 20} MiB{where}")
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


def as_exec(command: str, stdin: bytes | None) -> tuple[str, bytes | None]:
    """The exec request and stdin that run `command` with `stdin`: itself, or, over
    EXEC_LIMIT bytes, a short command that reads exactly the script's bytes from stdin
    (`head -c` reads no further), the rest of stdin left to it, and evaluates them in sh,
    as every command cargoship sends is written for. A command that is `sh -c SCRIPT` or
    `sudo -n -- sh -c SCRIPT` sends SCRIPT itself, behind the same prefix: as an argument,
    a script over the kernel's 128 KiB for one (MAX_ARG_STRLEN) could not start."""
    data = command.encode()
    if len(data) <= EXEC_LIMIT:
        return command, stdin
    prefix = ""
    for head in ("sh -c ", "sudo -n -- sh -c "):
        script = _unquoted(command.removeprefix(head)) if command.startswith(head) else None
        if script is not None:
            prefix, data = head.removesuffix("sh -c ").strip(), script.encode()
    reader = f"sh -c 'eval \"$(head -c {len(data)})\"'"
    return (f"{prefix} {reader}" if prefix else reader), data + (stdin or b"")


def _unquoted(word: str) -> str | None:
    """The string shlex.quote made `word` of, or None if `word` is not one quoted word.
    Its exact inverse, in linear time (shlex.split took 4 s of CPU for a 600 KB command)."""
    if len(word) < 2 or word[0] != "'" or word[-1] != "'":
        return None
    parts = word[1:-1].split("'\"'\"'")
    if any("'" in part for part in parts):
        return None
    return "'".join(parts)


def _loop_time(monotonic_deadline: float) -> float:
    """A time.monotonic() deadline on the running loop's clock."""
    loop = asyncio.get_running_loop()
    return loop.time() + (monotonic_deadline - time.monotonic())
