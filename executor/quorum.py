"""The quorum gate again before each controller (the plan's preflight judged the cluster
as it was then; minutes of rollout later a member may have stopped or fallen behind): once
before its node is cordoned (a cluster already short of a member is not drained for
nothing) and once more after the drain, right before its engine is stopped (a drain can
take minutes, and a member lost meanwhile must stop the rollout there). Every controller
is read each time, in parallel, over the apply's own sessions:
its engine service's state and its look at its etcd member and API server
(planner/facts/etcd.py); planner/facts/etcd_gate.py judges them with the controller about
to stop named. A cluster the gate does not cover (one controller, an external datastore,
no embedded etcd) passes, as the plan said.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

from planner.errors import CargoshipError
from planner.facts.distro import LAYOUTS, parse_service_state, status_snippet
from planner.facts.etcd import READYZ_TIMEOUT, TIMEOUT, etcd_fact, parse_etcd
from planner.facts.etcd_gate import ControllerEtcd, Verdict, judge, member_back
from planner.hosts.batch import FactParseError, Output
from planner.threads import Executor

from .remote import HostWriter

log = logging.getLogger("cargoship.executor")

# The look's own waits (three member requests and /readyz, each bounded), and some slack.
LOOK_TIMEOUT = 3 * TIMEOUT + READYZ_TIMEOUT + 10


@dataclass(frozen=True)
class Controller:
    label: str
    writer: HostWriter
    init: str
    data_dir: str | None = None  # the engine's `data-dir` when its config moves it


class Gate(Protocol):
    def __call__(self, stopping: str, max_age: float = 0.0) -> Verdict:
        """The verdict on stopping `stopping`, judged from looks at most `max_age` seconds
        old (0: read now)."""


# The look before a cordon may be the one the previous controller's back check just took
# (it reads every controller too): within this many seconds it is not taken again. The
# look right before a stop is always taken then.
REUSE = 2.0


@dataclass
class Looks:
    """Every controller's look, read in parallel; the last one kept for reuse."""

    controllers: Sequence[Controller]
    distro: str
    _last: tuple[float, list[ControllerEtcd]] | None = None

    def read(self, max_age: float = 0.0) -> list[ControllerEtcd]:
        if self._last is not None and time.monotonic() - self._last[0] <= max_age:
            return self._last[1]
        with Executor(max_workers=max(1, len(self.controllers)),
                      thread_name_prefix="cargoship-quorum") as pool:
            views = list(pool.map(lambda c: read_controller(c, self.distro),
                                  self.controllers))
        self._last = (time.monotonic(), views)
        return views


def split_look(text: str) -> tuple[str, str]:
    """The probe's output: the service's `state ...` line, then the etcd look."""
    first, _, rest = text.partition("\n")
    return (parse_service_state(first.partition(" ")[2]) if first.startswith("state ")
            else "unknown"), rest


def read_controller(c: Controller, distro: str) -> ControllerEtcd:
    layout = LAYOUTS[distro]
    script = status_snippet(c.init, layout.controller_service) + "\n" + \
        etcd_fact(layout, c.data_dir).command
    try:
        result = c.writer.run_root(script, timeout=LOOK_TIMEOUT, check=False)
        engine, look = split_look(result.stdout.decode("utf-8", "replace"))
        return ControllerEtcd(c.label, engine, parse_etcd(Output(look, result.exit_code)))
    except (CargoshipError, OSError, FactParseError) as exc:
        return ControllerEtcd(c.label, "unknown", None, str(exc)[:200])


def make_gate(looks: Looks, external: bool) -> Gate:
    def gate(stopping: str, max_age: float = 0.0) -> Verdict:
        verdict = judge(looks.read(max_age), external=external, stopping=stopping)
        log.debug("quorum gate before %s: %s", stopping, verdict.message() or verdict.summary)
        return verdict

    return gate


class Refused(CargoshipError):
    """The gate right before a controller's stop said no: nothing of it was stopped or
    changed (its node, drained and cordoned by us, is given back)."""


def refusal(gate: Gate, label: str, note: Callable[[str, str], None],
            when: str = "", max_age: float = 0.0) -> str | None:
    """Ask the gate before `label` stops: None to go on, else why not (what to fix).
    `when`: which of its looks this is, for the progress line."""
    verdict = gate(label, max_age)
    if not verdict.gated:
        return None
    if not verdict.problems:
        note(label, f"quorum gate passed{when}: {verdict.summary}")
        return None
    note(label, f"quorum gate refused{when}: {verdict.message()}")  # as it happens
    return (f"the etcd quorum gate refused to stop {label}: {verdict.message()}; fix that "
            "(the hosts already done keep their changes), then plan and apply again")


BACK_INTERVAL = 0.5  # seconds between two looks while a restarted member catches up
Back = Callable[[str], "str | None"]


def make_back_check(looks: Looks, timeout: float, interval: float = BACK_INTERVAL) -> Back:
    """After a controller's restart, on top of its fresh readiness: wait (up to `timeout`)
    until its member is listed, healthy and caught up with the leader; None then, else what
    it still lacked."""
    def back(label: str) -> str | None:
        deadline = time.monotonic() + timeout
        while True:
            why = member_back(looks.read(), label)
            if why is None or time.monotonic() + interval > deadline:
                return why
            time.sleep(interval)

    return back


OutcomeT = TypeVar("OutcomeT")


def caught_up(back: Back, label: str, outcome: OutcomeT,
              note: Callable[[str, str], None]) -> OutcomeT:
    """`outcome` (an applied HostOutcome) as it stands once the member is back, or failed
    with why: the change stays (the engine is back), the rollout goes no further."""
    why = back(label)
    if why is None:
        note(label, "etcd member listed, healthy and caught up with the leader")
        return outcome
    return replace(outcome, status="failed",  # type: ignore[type-var]
                   detail=f"the change is applied and the engine is back, but {why} after "
                          "the restart; not rolled back, and no further controller is "
                          "stopped: see to that member, then plan and apply again")
