"""planner/threads.py: no thread cargoship starts can take SIGINT, SIGTERM or SIGHUP, so
the kernel hands them to the main thread, the one whose waits they must interrupt; the
main thread's own mask is left as it was."""

from __future__ import annotations

import signal

from planner.threads import INTERRUPTS, Executor, start


def _mask() -> set[int]:
    return set(signal.pthread_sigmask(signal.SIG_BLOCK, []))


def test_started_threads_and_executor_workers_block_the_interrupts() -> None:
    before = _mask()
    seen: list[set[int]] = []
    start(lambda: seen.append(_mask()), name="t").join()
    with Executor(max_workers=2) as pool:
        seen += list(pool.map(lambda _: _mask(), range(4)))
    assert len(seen) == 5 and all(INTERRUPTS <= mask for mask in seen)
    assert _mask() == before and not INTERRUPTS & before
