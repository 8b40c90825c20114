"""The mutating half of the sync phases: one host at a time for controllers, a sliding
window of workers, and a rollback of the host in progress when it does not come back.

Per host with a change the engine reads at start, one remote script (restart.py,
swap_script.py), sent while the hosts before it roll, stages the new files; at the host's
turn it sets the in-progress marker; then cordon (remembering whether we did) and drain
(evicted pods followed with a watch); a controller then passes the etcd quorum gate once
more (quorum.py: a member lost during the drain stops the rollout here, the node given
back); then the script stops the engine, puts the files
in place (atomic, backed up) and starts it, and the host is awaited until it is freshly
back (readiness.py: a new engine process, a node status posted after the restart, seen
through the API's watch, and for a controller its API server's /readyz with its etcd
check); then uncordon if we cordoned. Chart values alone are written in place. If
anything fails after the first write (a crash loop is seen early), the previous files are
restored, the engine restarted and the node uncordoned, and the rollout stops: no further
host is touched. An uncordon that fails after the host came back is retried until a
deadline and never undoes the change.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TypeVar

from planner.desired.engine_files import DesiredFile
from planner.errors import CargoshipError

from . import inprogress, node_identity, quorum
from .drain import NodeOps
from .drain_pods import DrainOptions
from .file_writes import BACKUP_ROOT, Written, remove_file, restore_file, restore_tree, write_file
from .mirror_pod import MirrorView
from .remote import HostWriter
from .restart import Restart
from .restart_follow import NothingStopped
from .swap_steps import Step, remove_step, restore_step, restore_tree_step, write_step
from .waits import DEFAULT, Waits

log = logging.getLogger("cargoship.executor")
Progress = Callable[[str, str], None]  # (host, what is happening)
T = TypeVar("T")


def _soon(call: Callable[[str], T], arg: str) -> Future[T]:
    """call(arg) in a thread of its own: its outcome (result or exception) in the future."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(call(arg))
        except Exception as exc:  # noqa: BLE001 - any of them, or result() would wait forever
            future.set_exception(exc)

    threading.Thread(target=run, name=f"cargoship-read-{arg}", daemon=True).start()
    return future


def as_error(exc: BaseException) -> Exception:
    """An exception as it is shown in one line: ours and OSErrors as they are, anything
    else (a bug, a malformed answer nobody expected) with its type, never a traceback."""
    if isinstance(exc, CargoshipError | OSError):
        return exc
    return CargoshipError(f"unexpected {type(exc).__name__}: {exc}")


@dataclass
class HostJob:
    label: str
    node: str
    writer: HostWriter
    init: str
    service: str
    files: list[DesiredFile] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)
    restart: bool = False
    # Cordoned and drained before the restart: what the plan said for its changes
    # (options.drain.when); a restart without it leaves the node's containers running.
    drain: bool = False
    controller: bool = False
    # A controller's own API server: (ready, why not) from its /readyz.
    readyz: Callable[[], tuple[bool, str]] | None = None
    # restore-backup: put back the files an interrupted apply backed up here, then restart.
    restore_from: str | None = None
    # The host's own addresses: its node's InternalIP must be one (node_identity.py).
    addresses: frozenset[str] = frozenset()
    # rke2 controller: reads its API server's mirror pod (mirror_pod.py).
    mirror: Callable[[], MirrorView | str] | None = None


@dataclass(frozen=True)
class HostOutcome:
    host: str
    status: str  # "applied", "rolled back", "failed", "not started"
    detail: str = ""
    restarts: int = 0  # engine starts asked for on the host: the change's and a rollback's
    # The host's log lines since the restart that failed (shown under the detail, indented).
    log: tuple[str, ...] = ()


@dataclass
class Rollout:
    ops: NodeOps | None
    plan_id: str
    drain: DrainOptions
    ready_timeout: float
    progress: Progress
    stop: threading.Event = field(default_factory=threading.Event)
    # A second interrupt: the host in progress stops waiting and is rolled back now.
    abort: threading.Event = field(default_factory=threading.Event)
    # Hosts whose lock another run took over (our touches failed for over a minute): no
    # further host may be started then, someone else may be changing the cluster.
    locks_lost: Callable[[], set[str]] = set
    # Asked before each controller's cordon and again right before its stop (quorum.py);
    # None: not gated.
    gate: quorum.Gate | None = None
    # After a controller's restart: waits until its member is back and caught up.
    back: quorum.Back | None = None
    _refused: str = field(default="", init=False)  # why the gate stopped the rollout
    waits: Waits = DEFAULT
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

    def _note(self, host: str, what: str) -> None:
        log.debug("%s: %s", host, what)  # timestamped in --log-file
        self.progress(host, what)

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
        with ThreadPoolExecutor(max_workers=max(1, size),
                                thread_name_prefix="cargoship-worker") as pool:
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
            threading.Thread(target=self.ops.warm, args=(needed,), name="cargoship-warm",
                             daemon=True).start()
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

    def _host(self, job: HostJob,
              ahead: tuple[Restart, list[Step], int] | None = None) -> HostOutcome:
        written: list[Written] = []
        cordoned = stopped = False
        restart: Restart | None = None
        try:
            if job.restart:
                assert self.ops is not None
                # One script for the host, preloaded while the hosts before it rolled: it
                # has staged the new files; now it sets the in-progress marker (before the
                # cordon, so a run that dies from here on leaves the next plan a host to
                # recover), and waits while the node drains; the stop then follows the
                # drain's end without a round trip, sudo or a shell's start between them.
                restart, steps = ahead[:2] if ahead is not None else (
                    self._restart(job), self._steps(job))
                # The node is read while the host sets its marker: the cordon, which must
                # wait for the marker, is then one request.
                node = _soon(self.ops.read_node, job.node)
                restart.prepare(steps, inprogress.mark_script(self.plan_id))
                read = node.result()
                node_identity.check(read, job.node, job.label, job.addresses)
                if job.drain:
                    cordoned = self.ops.cordon(job.node, owner=self.plan_id, read=read)
                    self._note(job.label, f"cordoned node {job.node}" if cordoned
                               else f"node {job.node} was already cordoned")
                    report = self.ops.drain(job.node, self.drain, cordoned=True,
                                            then=self._preload)
                    self._note(job.label, f"drained node {job.node} "
                                          f"({len(report.evicted)} pod(s) evicted)")
                else:
                    self._preload()
                    self._note(job.label, f"node {job.node} not cordoned or drained, as "
                                          "the plan says (options.drain.when)")
                self._gate_before_stop(job)
                stopped = True  # from the moment we ask: a lost answer may hide a stop
                restart.run(steps, written, keep=True)
            else:
                self._write_in_place(job, written)
        except Exception as exc:
            # again and recorded: an unexpected type (a bug, a malformed answer) included.
            log.debug("%s failed", job.label, exc_info=True)
            exc = as_error(exc)
            if isinstance(exc, quorum.Refused):
                return self._refused_before_stop(job, exc, cordoned)
            if not written and (not stopped or isinstance(exc, NothingStopped)):
                detail = self._uncordon(job, cordoned, f"{exc}; nothing was changed")
                return HostOutcome(job.label, "failed", self._clear_mark(job, detail))
            return self._roll_back(job, written, cordoned, exc, restarts=int(stopped))
        finally:
            if restart is not None:
                # A drain that failed, or an interrupt: the script sent ahead runs nothing
                # (a no-op once `run` has let it go).
                restart.cancel()
        # The change is in and the host is back: from here on nothing rolls it back.
        if not job.restart:
            return HostOutcome(job.label, "applied")
        try:
            if cordoned and not self._uncordon_back(job):
                return HostOutcome(job.label, "failed", self._clear_mark(
                    job, "the change is applied and the host is back, but the node is left "
                         "cordoned: uncordon kept failing (see above); no rollback", restart),
                    restarts=1)
            # The host is done: failing to clear the marker must not roll it back.
            return HostOutcome(job.label, "applied",
                               self._clear_mark(job, "", restart).removeprefix("; "),
                               restarts=1)
        finally:
            if restart is not None:
                restart.release()

    def _gate_before_stop(self, job: HostJob) -> None:
        """The quorum gate once more, after the drain, right before the engine's stop: a
        member lost while the node drained stops the rollout here (quorum.Refused)."""
        if not job.controller or self.gate is None:
            return
        why = quorum.refusal(self.gate, job.label, self._note, " right before the stop")
        if why:
            self._refused = why
            raise quorum.Refused(why)

    def _refused_before_stop(self, job: HostJob, refused: quorum.Refused,
                             cordoned: bool) -> HostOutcome:
        """Nothing of the host was stopped or changed: its node, cordoned by us for the
        drain, is uncordoned (one cordoned by someone else stays so), its marker cleared,
        and it counts as not started, like a host refused before its cordon."""
        given = f"{refused}; its node was not drained" if not job.drain else \
            f"{refused}; its node was drained and " + (
                "is uncordoned again" if cordoned else "stays cordoned, as it was before")
        detail = self._uncordon(job, cordoned, given)
        return HostOutcome(job.label, "not started" if detail == given else "failed",
                           self._clear_mark(job, detail))

    def _steps(self, job: HostJob) -> list[Step]:
        steps = [restore_tree_step(job.restore_from)] if job.restore_from is not None else []
        steps += [write_step(d.path, d.content().encode(), mode=d.mode, plan_id=self.plan_id)
                  for d in job.files]
        steps += [remove_step(path, plan_id=self.plan_id) for path in job.deletes]
        return steps

    def _write_in_place(self, job: HostJob, written: list[Written]) -> None:
        """A change the engine does not read at start (chart values): no restart."""
        if job.restore_from is not None:
            restored = restore_tree(job.writer, job.restore_from)
            self._note(job.label, f"restored {restored} file(s) from {job.restore_from}")
        for desired in job.files:
            written.append(write_file(job.writer, desired.path,
                                      desired.content().encode(), mode=desired.mode,
                                      plan_id=self.plan_id))
            self._note(job.label, f"wrote {desired.path}")
        for path in job.deletes:
            written.append(remove_file(job.writer, path, plan_id=self.plan_id))
            self._note(job.label, f"removed {path}")

    def _restart(self, job: HostJob, *, rollback: bool = False) -> Restart:
        """Stop, change and start the engine in one remote script; back when fresh. A
        rollback's waits are not cut short by a second interrupt: it is what that asks for."""
        assert self.ops is not None
        return Restart(job.writer, job.init, job.service, job.node, job.controller,
                       job.readyz, self.ops.api, self.ready_timeout,
                       lambda what: self._note(job.label, what),
                       abort=threading.Event() if rollback else self.abort,
                       waits=self.waits, mirror=job.mirror)

    def interrupt_now(self) -> None:
        """A second interrupt: stop, and end the waits of the host(s) in progress now, so
        each is rolled back at once."""
        self.stop.set()
        self.abort.set()
        if self.ops is not None:
            self.ops.interrupt()

    def _uncordon_back(self, job: HostJob) -> bool:
        """Uncordon a host that came back; API errors are retried, never a rollback."""
        assert self.ops is not None
        try:
            self.ops.uncordon_retrying(
                job.node, self.waits.uncordon_timeout,
                lambda exc: self._note(job.label, f"{exc}; retrying"))
        except Exception as exc:  # noqa: BLE001 - the host is back whatever this raised
            self._note(job.label,
                       f"uncordon failed for {self.waits.uncordon_timeout:g} s: {exc}")
            return False
        self._note(job.label, "uncordoned")
        return True

    def _uncordon(self, job: HostJob, cordoned: bool, detail: str) -> str:
        """Give the node back if we took it; the detail says if that failed."""
        if cordoned and self.ops is not None:
            try:
                self.ops.uncordon(job.node)
                self._note(job.label, "uncordoned")
            except Exception as exc:  # noqa: BLE001 - said, never raised: the host's outcome
                return f"{detail}; UNCORDON FAILED, the node is left cordoned: {exc}"
        return detail

    def _roll_back(self, job: HostJob, written: list[Written], cordoned: bool,
                   cause: Exception, restarts: int = 0) -> HostOutcome:
        self._note(job.label, f"FAILED: {cause}; rolling back")
        try:
            if job.restart and written:
                # A run killed from here on must not leave the failed files looking done.
                inprogress.mark(job.writer, self.plan_id, "rolling back",
                                f"{BACKUP_ROOT}/{self.plan_id}")
            if job.restart:
                # The engine may be up with the new config (running, never Ready): it reads
                # its files only at start, so it goes down before the old ones come back.
                restarts += 1
                self._restart(job, rollback=True).run(
                    [restore_step(item) for item in reversed(written)], [])
            else:
                for item in reversed(written):
                    restore_file(job.writer, item)
                    self._note(job.label, f"restored {item.path}")
        except Exception as exc:  # noqa: BLE001 - any failure: say what is left
            exc = as_error(exc)
            # Say what a person must look at: where the old files are, the engine, the node.
            left = [f"backups of the previous files are in "
                    f"{BACKUP_ROOT}/{self.plan_id} on the host"] if written else []
            if job.restart:
                left.append("the engine was stopped by cargoship and may still be stopped")
            left.append("the node is left cordoned" if cordoned
                        else "the node was not cordoned by cargoship")
            return HostOutcome(job.label, "failed",
                               f"{cause}; ROLLBACK FAILED: {exc}; " + "; ".join(left), restarts,
                               getattr(cause, "log", ()))
        restored = f"{cause}; previous files restored and the engine is running again"
        detail = self._uncordon(job, cordoned, restored)
        if detail == restored:
            detail = self._clear_mark(job, detail)
        return HostOutcome(job.label, "rolled back" if detail == restored else "failed",
                           detail, restarts, getattr(cause, "log", ()))

    def _clear_mark(self, job: HostJob, detail: str, restart: Restart | None = None) -> str:
        """The host is whole again; if the marker can't go, the next plan will offer to
        recover a host that needs nothing: harmless, but say so. Removed by the host's
        restart script when it is still there (`restart`, kept by its run), else by a
        command of its own."""
        if not job.restart:
            return detail
        if restart is not None and restart.finish(inprogress.clear_command()):
            return detail
        try:
            inprogress.clear(job.writer)
        except Exception as exc:  # noqa: BLE001 - said in the outcome
            return f"{detail}; could not clear the in-progress marker: {exc}"
        return detail
