"""`cargoship force-unlock`: remove a crashed run's lock, by its id, from every host."""

from __future__ import annotations

from planner.config.model import ClusterConfig
from planner.errors import CargoshipError
from planner.hosts.pool import parallel
from planner.hosts.ssh import ConnectOptions

from .connect import connect_all
from .lock import check_lock_id, force_unlock
from .remote import HostWriter


def force_unlock_all(config: ClusterConfig, lock_id: str) -> list[str]:
    check_lock_id(lock_id)
    connected = connect_all(config, ConnectOptions(config.options.connect_timeout))
    failures = [str(c) for c in connected if isinstance(c, Exception)]
    writers = [c for c in connected if isinstance(c, HostWriter)]
    try:
        if failures:
            raise CargoshipError("cannot reach every host: " + "; ".join(failures))
        removed = parallel(writers, lambda w: force_unlock(w, lock_id),
                           config.options.host_concurrency)
        return [w.label for w, r in zip(writers, removed, strict=True) if r is True]
    finally:
        for writer in writers:
            writer.close()
