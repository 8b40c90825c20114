"""Run one function per host in parallel, at most `limit` at a time, results in input order."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from ..threads import Executor

T = TypeVar("T")
R = TypeVar("R")


def parallel(items: Sequence[T], fn: Callable[[T], R], limit: int) -> list[R | Exception]:
    """Each item's result, or the Exception it raised (so one bad host can't hide others)."""
    if not items:
        return []

    def guarded(item: T) -> R | Exception:
        try:
            return fn(item)
        except Exception as exc:  # noqa: BLE001 - returned to the caller, who reports it
            return exc

    if len(items) == 1 or limit == 1:
        return [guarded(item) for item in items]
    executor = Executor(max_workers=min(limit, len(items)), thread_name_prefix="cargoship-host")
    try:
        return list(executor.map(guarded, items))
    finally:
        # On Ctrl-C don't wait for queued hosts; running ones end with their SSH timeouts.
        executor.shutdown(wait=False, cancel_futures=True)
