"""One libssh2 session on the run's event loop (loop.py): its calls made again whenever
libssh2 says EAGAIN, each wait on the session's socket in the direction libssh2 is
blocked on.

Several coroutines may use one session at once: a gateway's channels, one per host
behind it; a lock's touch beside a running restart script. libssh2 reads whatever
arrives for any channel of the session into that channel's queue, so a call for one
channel can take another's data off the socket while that one sleeps on the socket,
which then stays quiet. So after every call on the session, each sleeper that said what
it waits for (`ready`: data queued for its channel, room in its window) is woken when
that is now true, and the sleepers that could not say (a channel being opened, a
handshake) are woken to try again; a sleeper woken that way and still blocked wakes no
one in turn, so two sleepers never wake each other forever. No sleeper sleeps longer
than RECHECK without trying again: a net for whatever the rules above miss.

A call that says EAGAIN may already have its packet encrypted and partly on the wire, and
libssh2 then sends nothing else on the session, answering every other call with EAGAIN,
until the same call is made again and finishes it (transport.c, send_existing). So a call
nobody waits for any more (its waiter cancelled, a channel's close) is never left there:
`settle` and `call_soon` make it again in the background until its packet is out or the
wire is closed. Left half sent, one host's timed-out command or closed channel would cut
off every other command on its session, and every host behind a shared bastion.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Coroutine
from typing import Any, Literal

from ssh2 import exceptions as ssh2_errors
from ssh2.error_codes import LIBSSH2_ERROR_EAGAIN

EAGAIN: int = LIBSSH2_ERROR_EAGAIN

# libssh2_session_block_directions bits (libssh2.h): what the session waits for.
BLOCK_INBOUND = 1
BLOCK_OUTBOUND = 2
RECHECK = 0.5

Ready = Callable[[], bool]
Woken = Literal["io", "nudge", "time", "first"]


def again(result: Any) -> bool:
    """Whether a libssh2 call's result says EAGAIN (an int, or a (code, ...) tuple)."""
    if isinstance(result, tuple):
        return bool(result) and result[0] == EAGAIN
    return isinstance(result, int) and result == EAGAIN


class Wire:
    def __init__(self, session: Any, sock: socket.socket) -> None:
        self.session = session
        self.sock = sock
        self._fd = sock.fileno()
        self._sleepers: dict[asyncio.Future[Woken], Ready | None] = {}
        self._reading = False
        self._writing = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._opening: asyncio.Lock | None = None
        self.jammed = 0  # opens given up on but still running (see open())
        self._finishing: set[asyncio.Task[None]] = set()
        # The call that began the packet half on the wire, if one is: fn and its arguments.
        self._pending: tuple[Callable[..., Any], tuple[Any, ...]] | None = None

    async def open(self, fn: Callable[..., Any], *args: Any, timeout: float) -> Any:
        """A channel opened by fn(*args) within `timeout`.

        libssh2 keeps the state of a channel being opened in the session, not the channel:
        two opens at once would finish each other's, so a session's opens take turns. And
        an open cannot be dropped half-way: one that runs out of time goes on in the
        background (a channel that comes too late is closed), and the session is `jammed`
        until it ends, so its owner can open elsewhere meanwhile (gateways.py)."""
        lock = self._opening = self._opening or asyncio.Lock()
        await lock.acquire()
        # The time is the open's own, counted once it is this one's turn: the opens queued
        # before it are bounded by theirs.
        task = asyncio.ensure_future(self.call(fn, *args))
        handed_on = False
        try:
            return await asyncio.wait_for(asyncio.shield(task), timeout)
        except BaseException:
            if not task.done():
                # Still running: the session's opens wait for this one to end.
                self.jammed += 1
                task.add_done_callback(lambda done: self._unjam(done, lock))
                handed_on = True
            raise
        finally:
            if not handed_on:
                lock.release()

    def _unjam(self, task: asyncio.Future[Any], lock: asyncio.Lock) -> None:
        self.jammed -= 1
        lock.release()
        if not task.cancelled() and task.exception() is None:
            late = task.result()
            self.call_soon(late.close)  # a channel nobody wants any more

    async def call(self, fn: Callable[..., Any], *args: Any, ready: Ready | None = None) -> Any:
        """fn(*args), made again until it does not say EAGAIN; its result. Cancelled with
        its packet half sent, the call is finished in the background (`settle`)."""
        woken: Woken = "first"
        while True:
            result = self.attempt(fn, *args)
            self.nudge(everyone=woken != "nudge")
            if not again(result):
                return result
            try:
                woken = await self.wait(ready)
            except asyncio.CancelledError:
                self.settle(_owner(fn))
                raise

    def attempt(self, fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args) once, noting whether it began a packet it left half sent: only that
        call, made again, can finish it (`settle`)."""
        before = self.half_sent()
        result = fn(*args)
        if not self.half_sent():
            self._pending = None
        elif not before or (self._pending is not None and self._pending[0] == fn):
            self._pending = (fn, args)
        return result

    def settle(self, owner: object) -> None:
        """`owner` (a channel, a session) stops waiting for its calls: a packet one of them
        left half sent is finished in the background, by the same call made again, until
        it is out or the wire is closed. Only the loop's own thread calls this."""
        pending = self._pending
        if pending is None or _owner(pending[0]) is not owner or self._fd < 0 \
                or not self.half_sent():
            return
        self._background(self._finish(*pending))

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """fn(*args) for its packet alone (a channel's close): nobody waits for its answer.
        Made now and, while it says EAGAIN with a packet on the wire (its own or one before
        it), again in the background until it has sent its own."""
        if self._fd < 0:
            return  # closed: its socket may be gone, its number another connection's
        try:
            result = self.attempt(fn, *args)
        except (ssh2_errors.SSH2Error, OSError):
            return  # the channel or the connection has gone: nothing is left to send
        self.nudge()
        if again(result) and self.half_sent() and self._fd >= 0:
            self._background(self._finish(fn, args))

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._finishing.add(task)
        task.add_done_callback(self._finishing.discard)

    async def _finish(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        # Ends when a call leaves no packet on the wire: its own is out, and what it would
        # wait for next is an answer nobody wants. A packet on the wire that is another
        # call's (this one then said EAGAIN without beginning its own) is that one's to
        # finish; this call, made again after it, sends its own.
        while self._fd >= 0:
            await self.wait()
            if self._fd < 0:
                return  # closed: libssh2 must not touch a socket that may be gone
            try:
                result = self.attempt(fn, *args)
            except (ssh2_errors.SSH2Error, OSError):
                return
            self.nudge()
            if not again(result) or not self.half_sent():
                return

    async def wait(self, ready: Ready | None = None, at_most: float = RECHECK) -> Woken:
        """Sleep until the socket is ready in libssh2's direction, or a call on the
        session may have let this sleeper on (see the module docstring), or RECHECK."""
        loop = self._loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Woken] = loop.create_future()
        self._sleepers[waiter] = ready
        directions = self.session.block_directions()
        if directions & BLOCK_OUTBOUND and not self._writing and self._fd >= 0:
            loop.add_writer(self._fd, self._on_io, "w")
            self._writing = True
        # EAGAIN with no direction: libssh2 waits for the peer (an answer still to come).
        if (directions & BLOCK_INBOUND or not directions) and not self._reading \
                and self._fd >= 0:
            loop.add_reader(self._fd, self._on_io, "r")
            self._reading = True
        timer = loop.call_later(at_most, _wake, waiter, "time")
        try:
            return await waiter
        finally:
            timer.cancel()
            self._sleepers.pop(waiter, None)

    def half_sent(self) -> bool:
        """After a call said EAGAIN: whether it left part of a packet on the wire. libssh2
        then sends nothing else on this session, answering every other packet with EAGAIN,
        until the same call is made again and finishes it (transport.c,
        transport_send_existing); a channel whose window is merely shut says "inbound"."""
        return bool(self.session.block_directions() & BLOCK_OUTBOUND)

    def nudge(self, everyone: bool = True) -> None:
        for waiter, ready in list(self._sleepers.items()):
            if waiter.done():
                continue
            if ready is None:
                if everyone:
                    waiter.set_result("nudge")
            elif ready():
                waiter.set_result("nudge")

    def _on_io(self, direction: str) -> None:
        # Level-triggered: stop watching until someone blocks again, or this would spin.
        self._unwatch(read=direction == "r", write=direction == "w")
        for waiter in list(self._sleepers):
            _wake(waiter, "io")

    def _unwatch(self, read: bool = True, write: bool = True) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        if read and self._reading:
            loop.remove_reader(self._fd)
            self._reading = False
        if write and self._writing:
            loop.remove_writer(self._fd)
            self._writing = False

    def shut(self) -> None:
        """close(), then the socket itself: never closed while watched."""
        self.close()
        self.sock.close()

    def close(self) -> None:
        """Stop watching the socket (before it is closed: its number may be reused) and
        wake every sleeper; their next call meets the closed socket."""
        self._unwatch()
        self._fd = -1
        for waiter in list(self._sleepers):
            _wake(waiter, "io")


def _owner(fn: Callable[..., Any]) -> object:
    """What a call belongs to: the channel or session of a bound method."""
    return getattr(fn, "__self__", fn)


def _wake(waiter: asyncio.Future[Woken], why: Woken) -> None:
    if not waiter.done():
        waiter.set_result(why)
