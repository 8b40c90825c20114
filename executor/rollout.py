"""The mutating half of the sync phases: one host at a time for controllers, a sliding
window of workers, and a rollback of the host in progress when it does not come back.

A host that fails stops the rollout: no further host is touched. What each host goes
through (its marker, cordon and drain, the quorum gate, the restart, the uncordon, the
rollback) is host_flow.py; here, the order, the window and the interrupts, and the
scripts sent ahead to the hosts next in line while the hosts before them roll.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field

from planner.threads import Executor, start

from . import quorum
from .host_flow import HostFlow
from .host_job import HostJob, HostOutcome, as_error
from .restart import Restart
from .swap_steps import Step

log = logging.getLogger("cargoship.executor")


@dataclass
class Rollout(HostFlow):
    """Controllers one at a time, then workers in a window; see HostFlow for the
    settings."""

    # Hosts next in line, their restart script's head already on the host (sudo and the
    # shell started, the files staged) while the hosts before them roll: (restart, steps,
    # remote commands the host had run before).
    _preloaded: dict[str, tuple[Restart, list[Step], int]] = field(
        default_factory=dict, init=False)
    _begun: set[str] = field(default_factory=set, init=False)  # never preloaded again
    _preload_lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    # The hosts next in line, preloaded once a host in flight waits for its drain.
    _upcoming: Sequence[HostJob] = field(default=(), init=False)
    _warmed: int = field(default=0, init=False)  # API connections opened ahead so far

    def run(self, controllers: Sequence[HostJob], workers: Sequence[HostJob],
            worker_concurrency: int) -> list[HostOutcome]:
        started = time.monotonic()
        try:
            outcomes = self._run(controllers, workers, worker_concurrency)
        finally:
            self._drop_preloaded()
        log.info("rollout of %d controller(s) and %d worker(s) at concurrency %d took %.3f s",
                 len(controllers), len(workers), worker_concurrency,
                 time.monotonic() - started)
        return outcomes

    def _run(self, controllers: Sequence[HostJob], workers: Sequence[HostJob],
             worker_concurrency: int) -> list[HostOutcome]:
        outcomes: list[HostOutcome] = []
        controllers = self._leader_last(controllers)
        for i, job in enumerate(controllers):  # strictly one at a time
            if self._halted(outcomes):
                outcomes.append(HostOutcome(job.label, "not started", self._why()))
                continue
            # While it drains, the next controller (after the last, the first wave of
            # workers) gets its script.
            self._upcoming = controllers[i + 1:i + 2] or workers[:worker_concurrency]
            if job.restart and self.gate is not None:
                self._refused = quorum.refusal(self.gate, job.label, self._note,
                                               " before the cordon", quorum.REUSE) or ""
                if self._refused:
                    outcomes.append(HostOutcome(job.label, "not started", self._refused))
                    continue
            outcome = self.run_host(job)
            if job.restart and self.back is not None and outcome.status == "applied":
                outcome = quorum.caught_up(self.back, job.label, outcome, self._note)
            outcomes.append(outcome)
        outcomes += self._window(workers, worker_concurrency, outcomes)
        return outcomes

    def _leader_last(self, controllers: Sequence[HostJob]) -> Sequence[HostJob]:
        """The controller whose etcd member leads goes last, the others in config order:
        stopping a follower costs no election, so the cluster changes leader once (at
        the leader's own stop, where etcd hands leadership on) instead of up to once per
        controller, and raft drops the writes forwarded to a leader while it hands over.
        The look is the one the first controller's gate then reuses. No leader known
        (not gated, or a problem the first gate will name): config order."""
        if self.gate is None or sum(1 for j in controllers if j.restart) < 2:
            return controllers
        leader = self.gate("", quorum.REUSE).leader
        last = [j for j in controllers if j.label == leader and j.restart]
        if not last or last[0] is controllers[-1]:
            return controllers
        self._note(last[0].label, "restarts last: its etcd member leads")
        return [j for j in controllers if j is not last[0]] + last

    def _halted(self, outcomes: list[HostOutcome]) -> bool:
        return self.stop.is_set() or bool(self.locks_lost()) or any(
            o.status != "applied" for o in outcomes)

    def _why(self) -> str:
        if self.stop.is_set():
            return "interrupted"
        lost = self.locks_lost()
        if lost:
            return f"lost the lock on {', '.join(sorted(lost))} to another run"
        return "the etcd quorum gate stopped the rollout" if self._refused else \
            "an earlier host failed"

    def _window(self, jobs: Sequence[HostJob], size: int,
                earlier: list[HostOutcome]) -> list[HostOutcome]:
        """Keep up to `size` workers in flight; a finished one makes room for the next."""
        results: dict[str, HostOutcome] = {}
        pending = list(jobs)
        with Executor(max_workers=max(1, size), thread_name_prefix="cargoship-worker") as pool:
            running: dict[Future[HostOutcome], HostJob] = {}
            while pending or running:
                while pending and len(running) < size and \
                        not self._halted(earlier + list(results.values())):
                    job = pending.pop(0)
                    running[pool.submit(self.run_host, job)] = job
                if not running:
                    break
                self._upcoming = pending[:size]
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    job = running.pop(future)
                    failure = future.exception()
                    results[job.label] = future.result() if failure is None else \
                        HostOutcome(job.label, "failed", str(as_error(failure)))
        for job in pending:
            results[job.label] = HostOutcome(job.label, "not started", self._why())
        return [results[job.label] for job in jobs]

    def _preload(self) -> None:
        """Send the hosts next in line their scripts: once a host's evictions are asked
        for, when the rollout only waits for its pods to go, rather than as the hosts in
        flight begin (their sudo and staging would compete with those hosts' cordons and
        evictions for this machine's CPU)."""
        if self._halted([]):
            return
        # Each host in flight holds an API connection for its requests and one for its
        # watch: a wave larger than any before it gets them opened now, while it waits.
        needed = 2 * sum(1 for job in self._upcoming if job.restart)
        with self._preload_lock:
            warm, self._warmed = needed > self._warmed, max(needed, self._warmed)
        if warm and self.ops is not None:
            start(self.ops.warm, args=(needed,), name="cargoship-warm")
        for job in self._upcoming:
            if not job.restart or self.ops is None:
                continue
            with self._preload_lock:
                # The window may begin a host before it moves its list of the next ones.
                if job.label in self._preloaded or job.label in self._begun:
                    continue
                before = job.writer.round_trips
                restart, steps = self._restart(job), self._steps(job)
                restart.preload(steps)
                self._preloaded[job.label] = (restart, steps, before)
            log.debug("%s: restart script preloaded", job.label)

    def _drop_preloaded(self) -> None:
        """Hosts never started: their scripts end having changed nothing (all of them
        told at once, then awaited)."""
        with self._preload_lock:
            dropped = [restart for restart, _, _ in self._preloaded.values()]
            self._preloaded.clear()
        for restart in dropped:
            restart.cancel(wait=0)
        deadline = time.monotonic() + self.waits.cancel_wait
        for restart in dropped:
            restart.wait_cancelled(deadline - time.monotonic())

    def run_host(self, job: HostJob) -> HostOutcome:
        with self._preload_lock:
            ahead = self._preloaded.pop(job.label, None)
            self._begun.add(job.label)
        # Both lines timestamped in --log-file: the benchmark measures each host's span.
        log.debug("%s: host begins", job.label)
        before = job.writer.round_trips if ahead is None else ahead[2]
        outcome = self._host(job, ahead)
        log.debug("%s: host ends: %s after %d remote command(s)", job.label, outcome.status,
                  job.writer.round_trips - before)
        return outcome

    def interrupt_now(self) -> None:
        """A second interrupt: stop, and end the waits of the host(s) in progress now, so
        each is rolled back at once."""
        self.stop.set()
        self.abort.set()
        if self.ops is not None:
            self.ops.interrupt()
