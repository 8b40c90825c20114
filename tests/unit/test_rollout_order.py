"""Rollout ordering rules, with the host work replaced by a recorder (the lab tests do the
real thing): controllers one at a time, a sliding window of workers, a stop on failure,
on Ctrl-C and when a lock is lost."""

from __future__ import annotations

import threading
import time

import pytest

from executor.drain_pods import DrainOptions
from executor.host_job import HostJob, HostOutcome
from executor.rollout import Rollout
from planner.config.model import Options
from tests.unit.fakes import FakeRestart, FakeRollout, restarting

DEFAULT_WORKERS = Options().worker_concurrency  # concurrency.workers when the config says none


class Recording(Rollout):
    def __init__(self, fail: set[str] = frozenset(), **kw) -> None:  # type: ignore[no-untyped-def]
        self.notes: list[tuple[str, str]] = []  # the progress lines, (host, what)
        super().__init__(None, "p", DrainOptions(), 1.0,
                         lambda h, w: self.notes.append((h, w)), **kw)
        self.fail, self.started, self.active, self.peak = fail, [], 0, 0
        self.in_flight: list[HostJob] = []
        # Every moment a host began: the hosts in flight then, itself included.
        self.together: list[list[str]] = []
        self.guard = threading.Condition()

    def run_host(self, job: HostJob) -> HostOutcome:
        with self.guard:
            self.started.append(job.label)
            self.active += 1
            self.peak = max(self.peak, self.active)
            self.in_flight.append(job)
            self.together.append([j.label for j in self.in_flight])
            self.guard.notify_all()
            if job.controller:
                # A controller holds its slot until another host joins it (or 0.2 s): a
                # rollout that would overlap it with another host is then seen doing so
                # every time, not only when the threads happen to interleave.
                self.guard.wait_for(lambda: len(self.in_flight) > 1, timeout=0.2)
        time.sleep(0.02)  # hold the slot a little, so overlapping would be visible
        with self.guard:
            self.active -= 1
            self.in_flight.remove(job)
        return HostOutcome(job.label, "failed" if job.label in self.fail else "applied")


def jobs(*names: str, controller: bool = False) -> list[HostJob]:
    return [HostJob(n, n, None, "runit", "svc", controller=controller)  # type: ignore[arg-type]
            for n in names]


@pytest.mark.parametrize("concurrency", [pytest.param(3, id="workers-3"),
                                         pytest.param(DEFAULT_WORKERS, id="default")])
def test_window_never_exceeds_concurrency_and_keeps_order(concurrency: int) -> None:
    """Controllers (etcd members: two down at once can lose quorum) strictly one at a
    time and alone, whatever the worker concurrency, then the workers' window fills."""
    rollout = Recording()
    out = rollout.run(jobs("c1", "c2", "c3", controller=True),
                      jobs(*(f"w{i}" for i in range(8))), concurrency)
    assert [o.status for o in out] == ["applied"] * 11
    assert rollout.started[:3] == ["c1", "c2", "c3"]
    with_a_controller = [hosts for hosts in rollout.together
                         if len(hosts) > 1 and any(h.startswith("c") for h in hosts)]
    assert with_a_controller == [], f"a controller was in flight with others: {with_a_controller}"
    assert rollout.peak == concurrency  # the workers' window filled, and no more


def test_a_failure_stops_the_rollout() -> None:
    rollout = Recording(fail={"c1"})
    out = rollout.run(jobs("c1", "c2"), jobs("w1"), 2)
    assert [(o.host, o.status, o.detail) for o in out] == [
        ("c1", "failed", ""), ("c2", "not started", "an earlier host failed"),
        ("w1", "not started", "an earlier host failed")]


def test_a_lost_lock_stops_the_rollout() -> None:
    lost: set[str] = set()
    rollout = Recording(locks_lost=lambda: set(lost))
    first = rollout.run_host
    def run_and_lose(job: HostJob) -> HostOutcome:
        lost.add("wrk-9")
        return first(job)
    rollout.run_host = run_and_lose  # type: ignore[method-assign]
    out = rollout.run(jobs("c1", "c2"), [], 1)
    assert out[1] == HostOutcome("c2", "not started", "lost the lock on wrk-9 to another run")


def test_interrupt_lets_the_host_in_progress_finish() -> None:
    rollout = Recording()
    first = rollout.run_host
    def run_and_interrupt(job: HostJob) -> HostOutcome:
        rollout.stop.set()
        return first(job)
    rollout.run_host = run_and_interrupt  # type: ignore[method-assign]
    out = rollout.run(jobs("c1", "c2"), jobs("w1"), 1)
    assert [o.status for o in out] == ["applied", "not started", "not started"]


def scripts(rollout: FakeRollout) -> list[FakeRestart]:
    """Every restart script the rollout made, in the order of its hosts' names."""
    return [r for host in sorted(rollout.restarts) for r in rollout.restarts[host]]


def test_hosts_next_in_line_are_preloaded_once_and_never_after_they_began() -> None:
    rollout = FakeRollout()
    w1, w2 = restarting("w1", "w2")
    rollout._upcoming = [w1, w2]
    rollout._preload()
    rollout._preload()  # a second host in flight reaching its evictions
    assert len(scripts(rollout)) == 2
    # Takes its preloaded script; its drain, waiting for pods, preloads the next ones.
    assert rollout.run_host(w1).status == "applied"
    # The window begins a host before it moves its list of the next ones: a host in
    # flight reaching its evictions meanwhile must not send w1 a second script.
    rollout._preload()
    assert len(scripts(rollout)) == 2
    rollout._drop_preloaded()  # w2 never began: its script is cancelled
    assert [s.cancelled for s in scripts(rollout)] == [False, True]


def warmed(rollout: FakeRollout) -> list[int]:
    for thread in threading.enumerate():
        if thread.name == "cargoship-warm":
            thread.join(5)
    return rollout.ops.warmed  # type: ignore[union-attr, attr-defined, no-any-return]


def test_api_connections_are_opened_ahead_for_a_wave_larger_than_any_before() -> None:
    """Two connections per host next in line (its requests, its watch), opened while the
    hosts before it roll; only when the wave is larger than any before it."""
    rollout = FakeRollout()
    ctl2, *wave = restarting("ctl-2", *(f"w{i}" for i in range(1, 9)))
    rollout._upcoming = [ctl2]
    rollout._preload()
    assert warmed(rollout) == [2]
    rollout._upcoming = wave
    rollout._preload()
    rollout._preload()  # another host in flight reaching its evictions
    assert warmed(rollout) == [2, 16]
    rollout._upcoming = wave[:3]  # the next window: the pool has enough
    rollout._preload()
    assert warmed(rollout) == [2, 16]
    rollout._drop_preloaded()


def restarting_controllers(*names: str) -> list[HostJob]:
    out = jobs(*names, controller=True)
    for job in out:
        job.restart = job.drain = True
    return out


def test_the_quorum_gate_stops_the_rollout_before_the_controller_it_refuses() -> None:
    from planner.facts.etcd_gate import Verdict

    asked: list[str] = []

    def gate(label: str, max_age: float = 0.0) -> Verdict:
        asked.append(label)
        if label == "c2":
            return Verdict(True, "etcd: 1 problem(s)", (("c3", "etcd member does not answer"),))
        return Verdict(True, "etcd: 3 members healthy")

    rollout = Recording(gate=gate)
    out = rollout.run(restarting_controllers("c1", "c2", "c3"), jobs("w1"), 2)
    # "": the look that orders the controllers (no leader known here), reused by c1's.
    assert asked == ["", "c1", "c2"] and rollout.started == ["c1"]
    assert [(o.host, o.status) for o in out] == [
        ("c1", "applied"), ("c2", "not started"), ("c3", "not started"),
        ("w1", "not started")]
    assert out[1].detail.startswith("the etcd quorum gate refused to stop c2: c3: etcd member "
                                    "does not answer; fix that")
    assert out[2].detail == "the etcd quorum gate stopped the rollout"
    # Said as it happens too, not only in the outcome at the end.
    assert ("c2", "quorum gate refused before the cordon: c3: etcd member does not answer") \
        in rollout.notes, rollout.notes


def test_a_member_not_caught_up_after_its_restart_fails_its_host_and_stops() -> None:
    rollout = Recording(back=lambda label: "its etcd member is 5000 entries behind the "
                        "leader" if label == "c1" else None)
    out = rollout.run(restarting_controllers("c1", "c2"), [], 2)
    assert rollout.started == ["c1"]
    assert out[0].status == "failed" and "5000 entries behind the leader after the restart; " \
        "not rolled back" in out[0].detail
    assert out[1].status == "not started"


def test_the_etcd_leaders_controller_restarts_last_the_others_in_config_order() -> None:
    from planner.facts.etcd_gate import Verdict

    def gate(label: str, max_age: float = 0.0) -> Verdict:
        return Verdict(True, "etcd: 3 members healthy", leader="c1")

    rollout = Recording(gate=gate)
    out = rollout.run(restarting_controllers("c1", "c2", "c3"), jobs("w1"), 2)
    assert rollout.started == ["c2", "c3", "c1", "w1"]
    assert [(o.host, o.status) for o in out] == [
        ("c2", "applied"), ("c3", "applied"), ("c1", "applied"), ("w1", "applied")]


@pytest.mark.parametrize(("leader", "restarts"), [
    (None, {"c1", "c2", "c3"}),  # not known (a problem the first gate names)
    ("c3", {"c1", "c2", "c3"}),  # already last
    ("c1", {"c2", "c3"}),  # c1 is not restarted: its member stays up
    ("c1", {"c1"}),  # one restart: nothing to order
])
def test_otherwise_controllers_keep_config_order(leader: str | None,
                                                 restarts: set[str]) -> None:
    from planner.facts.etcd_gate import Verdict

    def gate(label: str, max_age: float = 0.0) -> Verdict:
        return Verdict(True, "etcd: 3 members healthy", leader=leader)

    controllers = restarting_controllers("c1", "c2", "c3")
    for job in controllers:
        job.restart = job.drain = job.label in restarts
    rollout = Recording(gate=gate)
    rollout.run(controllers, [], 2)
    assert rollout.started == ["c1", "c2", "c3"]
