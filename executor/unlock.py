"""`cargoship force-unlock`: remove a crashed run's lock, by its id, from every host."""

from __future__ import annotations

from collections.abc import Callable

from planner.config.model import ClusterConfig
from planner.errors import CargoshipError
from planner.facts.lock_holder import LOCK, LockState
from planner.hosts.pool import parallel
from planner.hosts.ssh import ConnectOptions

from .connect import connect_all
from .host_lock import check_lock_id, force_unlock
from .remote import HostWriter


def force_unlock_all(config: ClusterConfig, lock_id: str,
                     confirm: Callable[[list[tuple[str, LockState]]], bool] | None = None,
                     ) -> list[str]:
    """`confirm(holders)` sees every host holding `lock_id` (and what it holds) before
    anything is removed; False removes nothing."""
    check_lock_id(lock_id)
    options = ConnectOptions(config.options.connect_timeout)
    connected = connect_all(config, options)
    failures = [str(c) for c in connected if isinstance(c, Exception)]
    writers = [c for c in connected if isinstance(c, HostWriter)]
    try:
        if failures:
            raise CargoshipError("cannot reach every host: " + "; ".join(failures))
        states = parallel(writers, lambda w: w.gather([LOCK])[0],
                          config.options.host_concurrency)
        unread = [str(s) for s in states if isinstance(s, Exception)]
        if unread:
            raise CargoshipError("cannot read the lock of every host: " + "; ".join(unread))
        holders = [(w, s) for w, s in zip(writers, states, strict=True)
                   if isinstance(s, LockState) and (s.holder or {}).get("id") == lock_id]
        if not holders:
            return []
        if confirm is not None and not confirm([(w.label, s) for w, s in holders]):
            raise CargoshipError("force-unlock cancelled; nothing was removed")
        removed = parallel([w for w, _ in holders], lambda w: force_unlock(w, lock_id),
                           config.options.host_concurrency)
        return [w.label for (w, _), r in zip(holders, removed, strict=True) if r is True]
    finally:
        for writer in writers:
            writer.close()
        options.close()
