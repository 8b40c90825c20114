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


def test_every_thread_of_the_product_starts_through_planner_threads() -> None:
    """A thread started elsewhere could take a Ctrl-C the main thread never sees."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    found = []
    for package in ("planner", "executor", "cargoship"):
        for path in (root / package).rglob("*.py"):
            if path == root / "planner" / "threads.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name):
                    name = node.func.attr if isinstance(node.func, ast.Attribute) \
                        else node.func.id
                    if name in ("Thread", "ThreadPoolExecutor", "Timer"):
                        found.append(f"{path.relative_to(root)}:{node.lineno} {name}")
    assert not found
