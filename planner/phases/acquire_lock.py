"""3. Acquire exclusive host lock: a lock file on each host, touched every 30 seconds by a
background task; another run may take it over only when untouched for over a minute.

A dry run reports it and never runs it; it still reads each host's lock, to warn when a
live run of someone else holds it (the plan can then already be out of date).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..context import HostState, PlanContext
from ..facts.lock_holder import LOCK, LOCK_PATH, LockState, unlock_command, whoami
from ..hosts.batch import Fact
from .base import Phase, Resource


class AcquireLock(Phase):
    title = "Acquire exclusive host lock"

    def reads(self, ctx: PlanContext, host: HostState) -> frozenset[str]:
        return frozenset({"lock"})

    def prefetch(self, ctx: PlanContext, host: HostState) -> list[tuple[Fact[Any], bool]]:
        return [(LOCK, False)]

    def assess(self, ctx: PlanContext, hosts: Sequence[HostState]) -> set[Resource]:
        writes: set[Resource] = set()
        live: dict[str, tuple[LockState, list[HostState]]] = {}
        # Read as the SSH user: Validate hosts has not checked sudo yet at this point. The
        # lock's directory is root's alone (0700), so the fact itself reads through
        # `sudo -n` where it can (facts/lock_holder.py).
        for host, (state,) in ctx.gather(self.title, lambda _: [LOCK], hosts=hosts):
            writes.add((host.config.index, "lock"))
            if state.live:
                # One run locks every host with one id: one warning per lock, not per host.
                key = str((state.holder or {}).get("id", "?"))
                live.setdefault(key, (state, []))[1].append(host)
            elif state.holder is not None:
                ctx.found(self.title, host, f"stale lock would be taken over: "
                                            f"{state.describe()}")
        for lock_id, (state, held) in live.items():
            # One host: the warning is filed under it. Several: one warning naming them.
            where = held[0] if len(held) == 1 else None
            on = "" if where else f" on {len(held)} hosts ({', '.join(h.label for h in held)})"
            ctx.warn(self.title, where,
                     f"{LOCK_PATH} is held by another run{on}: {state.describe()}; an apply "
                     f"now would wait or fail, and that run may be changing "
                     f"{'this host' if where else 'these hosts'}. If it crashed: "
                     f"{unlock_command(str(ctx.config.path), lock_id)}")
        if writes:
            ctx.found(self.title, None, f"would lock {len(writes)} host(s) as {whoami()}")
        return writes
