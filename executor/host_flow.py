"""One host's flow through a rollout (rollout.py runs it for each host, in order).

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
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TypeVar

from planner.threads import start

from . import inprogress, node_identity, quorum
from .drain import NodeOps
from .drain_pods import DrainOptions
from .file_writes import BACKUP_ROOT, Written, remove_file, restore_file, restore_tree, write_file
from .host_job import HostJob, HostOutcome, as_error
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

    start(run, name=f"cargoship-read-{arg}")
    return future


@dataclass
class _Reached:
    """How far one host's restart got: what a failure must undo, and what success gives
    back (the cordon). Kept apart from the steps that fill it in, so an exception out of
    one of them still finds it."""

    cordoned: bool = False  # by us (a node found cordoned is left as it was)
    stopped: bool = False  # the engine's stop was asked for
    restart: Restart | None = None  # the host's script, once made or taken from ahead


@dataclass
class HostFlow:
    """The rollout's settings (all of Rollout's constructor, in its order) and what one
    host goes through with them: `_host`, its rollback, its node given back."""

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

    def _note(self, host: str, what: str) -> None:
        log.debug("%s: %s", host, what)  # timestamped in --log-file
        self.progress(host, what)

    def _preload(self) -> None:
        """Called once the host's evictions are asked for (with no drain: before its
        stop): the hosts next in line get their scripts then (Rollout._preload)."""

    def _host(self, job: HostJob,
              ahead: tuple[Restart, list[Step], int] | None = None) -> HostOutcome:
        written: list[Written] = []
        reached = _Reached()
        try:
            if job.restart:
                self._restart_host(job, ahead, written, reached)
            else:
                self._write_in_place(job, written)
        except Exception as exc:
            # again and recorded: an unexpected type (a bug, a malformed answer) included.
            log.debug("%s failed", job.label, exc_info=True)
            exc = as_error(exc)
            if isinstance(exc, quorum.Refused):
                return self._refused_before_stop(job, exc, reached.cordoned)
            if not written and (not reached.stopped or isinstance(exc, NothingStopped)):
                given = f"{_own(exc, job)}; nothing was changed"
                self._note(job.label, f"FAILED: {given}")
                detail = self._uncordon(job, reached.cordoned, given)
                return HostOutcome(job.label, "failed", self._clear_mark(job, detail),
                                   left="its previous config (nothing was changed)" + (
                                       "" if detail == given else
                                       "; the node is left cordoned (uncordon failed)"))
            return self._roll_back(job, written, reached.cordoned, exc,
                                   restarts=int(reached.stopped))
        finally:
            if reached.restart is not None:
                # A drain that failed, or an interrupt: the script sent ahead runs nothing
                # (a no-op once `run` has let it go).
                reached.restart.cancel()
        # The change is in and the host is back: from here on nothing rolls it back.
        if not job.restart:
            return HostOutcome(job.label, "applied")
        return self._given_back(job, reached)

    def _restart_host(self, job: HostJob, ahead: tuple[Restart, list[Step], int] | None,
                      written: list[Written], reached: _Reached) -> None:
        """Marker, cordon and drain, the gate, then the script's stop, swap and start.
        `reached` says how far it got when it raises: what the failure must undo."""
        assert self.ops is not None
        # One script for the host, preloaded while the hosts before it rolled: it has
        # staged the new files; now it sets the in-progress marker (before the cordon, so a
        # run that dies from here on leaves the next plan a host to recover), and waits
        # while the node drains; the stop then follows the drain's end without a round
        # trip, sudo or a shell's start between them.
        restart, steps = ahead[:2] if ahead is not None else (
            self._restart(job), self._steps(job))
        reached.restart = restart
        # The node is read while the host sets its marker: the cordon, which must wait for
        # the marker, is then one request.
        node = _soon(self.ops.read_node, job.node)
        restart.prepare(steps, inprogress.mark_script(self.plan_id))
        read = node.result()
        node_identity.check(read, job.node, job.label, job.addresses)
        if job.drain:
            reached.cordoned = self.ops.cordon(job.node, owner=self.plan_id, read=read)
            self._note(job.label, f"cordoned node {job.node}" if reached.cordoned
                       else f"node {job.node} was already cordoned")
            report = self.ops.drain(job.node, self.drain, cordoned=True, then=self._preload,
                                    note=lambda what: self._note(job.label, what))
            self._note(job.label, f"drained node {job.node} "
                                  f"({len(report.evicted)} pod(s) evicted)")
        else:
            self._preload()
            self._note(job.label, f"node {job.node} not cordoned or drained, as the plan "
                                  "says (options.drain.when)")
        self._gate_before_stop(job)
        reached.stopped = True  # from the moment we ask: a lost answer may hide a stop
        restart.run(steps, written, keep=True)

    def _given_back(self, job: HostJob, reached: _Reached) -> HostOutcome:
        """A restarted host that is back: its node uncordoned if we cordoned it, its
        marker cleared. Nothing here rolls the change back."""
        try:
            if reached.cordoned and not self._uncordon_back(job):
                return HostOutcome(job.label, "failed", self._clear_mark(
                    job, "the change is applied and the host is back, but the node is left "
                         "cordoned: uncordon kept failing (see above); no rollback",
                    reached.restart), restarts=1,
                    left="the new config, engine running; the node is left cordoned "
                         "(uncordon kept failing)")
            # The host is done: failing to clear the marker must not roll it back.
            return HostOutcome(job.label, "applied",
                               self._clear_mark(job, "", reached.restart).removeprefix("; "),
                               restarts=1)
        finally:
            if reached.restart is not None:
                reached.restart.release()

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
        rollback's waits are not cut short by a second interrupt: it is what that asks for.
        A restore of a killed run's backups undoes that run's config as a rollback does:
        the API server pod still on the host is that config's, crash-looping perhaps, and
        its restarts before the new manifest replaces it are not this start's (readiness
        `undoing`; CI on this machine saw "crash-looping" there after a slow stop)."""
        assert self.ops is not None
        ops = self.ops
        return Restart(job.writer, job.init, job.service, job.node, job.controller,
                       job.readyz, ops.api, self.ready_timeout,
                       lambda what: self._note(job.label, what),
                       abort=threading.Event() if rollback else self.abort,
                       waits=self.waits, mirror=job.mirror,
                       apiserver_manifest=job.apiserver_manifest,
                       undoing=rollback or job.restore_from is not None,
                       fresh_node=lambda: ops.read_node(job.node))

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
        self._note(job.label, f"FAILED: {_own(cause, job)}; rolling back")
        undo: Restart | None = None
        restored = 0
        try:
            if job.restart and written:
                # A run killed from here on must not leave the failed files looking done.
                inprogress.mark(job.writer, self.plan_id, "rolling back",
                                f"{BACKUP_ROOT}/{self.plan_id}")
            if job.restart:
                # The engine may be up with the new config (running, never Ready): it reads
                # its files only at start, so it goes down before the old ones come back.
                restarts += 1
                undo = self._restart(job, rollback=True)
                undo.run([restore_step(item) for item in reversed(written)], [])
            else:
                for item in reversed(written):
                    restore_file(job.writer, item)
                    restored += 1
                    self._note(job.label, f"restored {item.path}")
        except Exception as exc:  # noqa: BLE001 - any failure: say what is left
            exc = as_error(exc)
            self._note(job.label, f"ROLLBACK FAILED: {_own(exc, job)}")
            if undo is not None:
                restored = undo.steps_done
            left = self._left_unrolled(job, len(written), restored, undo, cordoned)
            return HostOutcome(job.label, "failed", f"{_own(cause, job)}; ROLLBACK "
                               f"FAILED: {_own(exc, job)}; {left}", restarts,
                               getattr(cause, "log", ()), left=left)
        restored_msg = (f"{_own(cause, job)}; previous files restored and the engine "
                        "is running again")
        detail = self._uncordon(job, cordoned, restored_msg)
        if detail != restored_msg:  # rolled back, but the node could not be given back
            return HostOutcome(job.label, "failed", detail, restarts, getattr(cause, "log", ()),
                               left="its previous config (rolled back), engine running; the "
                                    "node is left cordoned (uncordon failed)")
        return HostOutcome(job.label, "rolled back", self._clear_mark(job, detail), restarts,
                           getattr(cause, "log", ()))

    def _left_unrolled(self, job: HostJob, written: int, restored: int,
                       undo: Restart | None, cordoned: bool) -> str:
        """What a person must look at after a failed rollback: where the previous files
        are, the engine, the node; said from how far the rollback got on the host."""
        backups = f"{BACKUP_ROOT}/{self.plan_id} on the host"
        left = []
        if written and restored >= written:
            left.append(f"the previous files are back in place (backups also in {backups})")
        elif written:
            left.append(f"backups of the previous files are in {backups}")
        if undo is not None and undo.engine_started:
            left.append("the engine was started again but was not seen back")
        elif job.restart:
            left.append("the engine was stopped by cargoship and may still be stopped")
        left.append("the node is left cordoned" if cordoned
                    else "the node was not cordoned by cargoship")
        return "; ".join(left)

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


def _own(exc: BaseException, job: HostJob) -> str:
    """An error as said under its host's name: without the host's label in front (the
    session's, its address; or the job's), which the host's outcome line begins with."""
    text = str(exc)
    for label in (job.writer.label, job.label):
        text = text.removeprefix(f"{label}: ")
    return text
