"""The quorum gate: may a controller be stopped now without the cluster losing etcd quorum?

Decided from every controller's own look at its member (etcd.py), at plan time (the
preflight) and again right before each controller is stopped (the rollout). On rke2 and
k3s each API server talks to its own member only, and k3s's member stops with its engine
(rke2's is recreated when its manifest changes at start, which a certificate renewal
does): a restart is safe only when, without that controller's member, a quorum of healthy
members is left. So the gate asks that

* every controller's engine is running, and every other controller's API server is ready;
* the etcd member list is the controllers' members (one each, no stranger, no learner);
* every member answers, is healthy, knows the same leader, and is caught up: its applied
  raft index within CAUGHT_UP_ENTRIES of the leader's;
* the members left when this controller's stops are a quorum of the member list.

The leader's controller is restarted last (executor/rollout.py): each other restart then
stops a follower, which costs no election, and the cluster changes leader once, not up to
once per controller (while a leader hands over, raft drops the writes forwarded to it).

A cluster of one controller, or one on an external datastore (datastore-endpoint), or
whose controllers have no embedded member (no server/tls/etcd certificates anywhere) is
not gated on etcd, and the plan says so. Pure: no I/O here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .etcd import EtcdLook, MemberStatus

# Well under etcd's own SnapshotCatchUpEntries (5000): past that the leader gives up
# sending a follower entries and sends it a whole snapshot. The controllers' statuses
# are read at about the same moment, so a busy cluster's writes between two reads stay
# far below this.
CAUGHT_UP_ENTRIES = 1000


@dataclass(frozen=True)
class ControllerEtcd:
    label: str
    engine: str  # the engine service's state word: "running", "stopped", ...
    look: EtcdLook | None  # None: the host could not be read (error says why)
    error: str = ""


@dataclass(frozen=True)
class Verdict:
    gated: bool
    summary: str  # one line for the plan / the log
    problems: tuple[tuple[str, str], ...] = ()  # (controller label, or "" for the cluster)
    leader: str | None = None  # the controller whose member leads (no problems only)

    def message(self) -> str:
        return "; ".join(f"{who}: {what}" if who else what for who, what in self.problems)


def external_datastore(settings: Iterable[Mapping[str, Any]]) -> bool:
    """k3s/rke2 on an external datastore (`datastore-endpoint` in a controller's merged
    engine config): no etcd member of theirs to gate on."""
    return any(merged.get("datastore-endpoint") not in (None, "") for merged in settings)


def _quorum(voters: int) -> int:
    return voters // 2 + 1


def judge(controllers: Sequence[ControllerEtcd], *, external: bool = False,
          stopping: str | None = None, bound: int = CAUGHT_UP_ENTRIES) -> Verdict:
    """`stopping`: the controller about to be stopped (None at plan time: every one of them
    in turn, so every rule holds for all)."""
    if len(controllers) < 2:
        return Verdict(False, "a single controller: not gated on etcd (its restart takes "
                              "the API down whatever etcd says)")
    if external:
        return Verdict(False, "external datastore (datastore-endpoint): not gated on etcd")
    if all(c.look is not None and not c.look.certs and c.look.curl for c in controllers):
        return Verdict(False, "no embedded etcd member on the controllers (no "
                              "server/tls/etcd client certificates): not gated on etcd")
    problems: list[tuple[str, str]] = []
    statuses: dict[str, MemberStatus] = {}
    for c in controllers:
        problems += _own(c, stopping, statuses)
    problems += _membership(controllers, statuses)
    leader_problems, healthy = _leader_and_lag(controllers, statuses, bound)
    problems += leader_problems
    voters = _voters(controllers)
    quorum = _quorum(voters)
    left = [label for label in healthy if label != stopping]
    if stopping is not None and len(left) < quorum:
        problems.append(("", f"stopping {stopping} would leave {len(left)} of {voters} etcd "
                             f"members healthy, and a quorum needs {quorum}"))
    elif stopping is None and len(healthy) - 1 < quorum:
        why = " (two members tolerate no member's loss: add a third controller)" \
            if voters == 2 else ""
        problems.append(("", f"stopping any controller would leave {max(0, len(healthy) - 1)} "
                             f"of {voters} etcd members healthy, and a quorum needs "
                             f"{quorum}{why}"))
    if problems:
        return Verdict(True, f"etcd: {len(problems)} problem(s)", tuple(problems))
    leader = next(iter({s.leader for s in statuses.values()}))
    name = next((label for label, s in statuses.items() if s.member_id == leader), leader)
    return Verdict(True, f"etcd: {voters} members healthy, leader on {name}, all caught "
                         f"up; quorum {quorum} kept while any one controller restarts; the "
                         f"leader's controller restarts last", leader=name)


def _own(c: ControllerEtcd, stopping: str | None,
         statuses: dict[str, MemberStatus]) -> list[tuple[str, str]]:
    """What is wrong with one controller's engine, API server and member."""
    out: list[tuple[str, str]] = []
    if c.look is None:
        return [(c.label, f"its etcd member could not be read: {c.error or 'no answer'}")]
    look = c.look
    if c.engine != "running":
        out.append((c.label, f"engine is {c.engine}: start it and wait until it is ready"))
    if c.label != stopping and look.readyz_ok is False:
        out.append((c.label, f"API server is not ready (/readyz: {look.readyz_detail})"))
    if not look.curl:
        return [*out, (c.label, "curl is not installed: cargoship reads the etcd member "
                                "through its JSON gateway with curl")]
    if not look.certs:
        return [*out, (c.label, "no etcd client certificate (server/tls/etcd/server-client."
                                "crt) while other controllers have one")]
    if look.status is None:
        return [*out, (c.label, f"etcd member does not answer ({look.status_error})")]
    statuses[c.label] = look.status
    if look.status.errors:
        out.append((c.label, "etcd member reports: " + ", ".join(look.status.errors)))
    elif look.status.leader is None:
        out.append((c.label, "etcd member has no leader"))
    if look.healthy is False:
        out.append((c.label, "etcd member is unhealthy (/health false)"))
    elif look.healthy is None:
        out.append((c.label, f"etcd member's /health unreadable ({look.health_error})"))
    return out


def _member_list(controllers: Sequence[ControllerEtcd]) -> list[tuple[str, str, bool]] | None:
    """(id, name, learner) of the member list, as the first controller that read it says."""
    for c in controllers:
        if c.look is not None and c.look.members is not None:
            return [(m.id, m.name, m.learner) for m in c.look.members]
    return None


def _voters(controllers: Sequence[ControllerEtcd]) -> int:
    listed = _member_list(controllers)
    if listed is None:
        return len(controllers)
    return sum(1 for _, _, learner in listed if not learner)


def _membership(controllers: Sequence[ControllerEtcd],
                statuses: dict[str, MemberStatus]) -> list[tuple[str, str]]:
    listed = _member_list(controllers)
    if listed is None:
        return [("", "no controller could read the etcd member list")] if statuses else []
    out: list[tuple[str, str]] = []
    ids = {member_id for member_id, _, _ in listed}
    mine = {s.member_id: label for label, s in statuses.items()}
    for label, status in statuses.items():
        if status.member_id not in ids:
            out.append((label, f"its etcd member {status.member_id} is not in the member list"))
    # Members no answering controller claims: the unread controllers' own, or strangers.
    unclaimed = [(i, n) for i, n, _ in listed if i not in mine]
    unread = len(controllers) - len(statuses)
    if len(unclaimed) > unread:
        names = ", ".join(f"{n or '?'} ({i})" for i, n in unclaimed)
        out.append(("", f"the etcd member list has {len(listed)} members for "
                        f"{len(controllers)} controllers: {names} belong to no controller "
                        "that answers (remove a stale member, or add its host to the config)"))
    for member_id, name, learner in listed:
        if learner:
            who = mine.get(member_id, "")
            out.append((who, f"etcd member {name or member_id} is a learner, not yet a voting "
                             "member: wait until it is promoted"))
    return out


def _leader_and_lag(controllers: Sequence[ControllerEtcd], statuses: dict[str, MemberStatus],
                    bound: int) -> tuple[list[tuple[str, str]], list[str]]:
    """Problems with the leader and each member's lag; the controllers whose member is
    healthy and caught up."""
    out: list[tuple[str, str]] = []
    leaders = {s.leader for s in statuses.values() if s.leader is not None}
    if len(leaders) > 1:
        said = ", ".join(f"{label} says {s.leader}" for label, s in statuses.items())
        out.append(("", f"the etcd members disagree on the leader ({said})"))
    leader = next(iter(leaders)) if len(leaders) == 1 else None
    top = next((s for s in statuses.values() if s.member_id == leader), None)
    if leader is not None and top is None and len(statuses) == len(controllers):
        out.append(("", f"the etcd leader {leader} is no controller's member"))
    healthy = []
    for c in controllers:
        status = statuses.get(c.label)
        if status is None or status.errors or status.leader is None or c.look is None \
                or c.look.healthy is not True or status.leader != leader:
            continue
        if top is not None:
            lag = top.applied_index - status.applied_index
            if lag > bound:
                out.append((c.label, f"etcd member is {lag} entries behind the leader "
                                     f"(applied {status.applied_index}, the leader "
                                     f"{top.applied_index}): wait until it catches up"))
                continue
        healthy.append(c.label)
    return out, healthy


def member_back(controllers: Sequence[ControllerEtcd], label: str,
                bound: int = CAUGHT_UP_ENTRIES) -> str | None:
    """After `label`'s restart: None once its member is in the member list (a voter),
    healthy, and caught up with the leader; else what it still lacks. A controller with
    no embedded member (no certificates) has nothing to wait for."""
    mine = next((c for c in controllers if c.label == label), None)
    if mine is None or mine.look is None:
        return f"its etcd member could not be read: {mine.error if mine else 'not found'}"
    look = mine.look
    if not look.certs:
        return None
    status = look.status
    if status is None:
        return f"its etcd member does not answer ({look.status_error})"
    if status.errors or status.leader is None:
        return "its etcd member " + (f"reports: {', '.join(status.errors)}" if status.errors
                                     else "has no leader")
    if look.healthy is not True:
        return "its etcd member is not healthy (/health)"
    listed = {m.id: m for c in controllers if c.look is not None and c.look.members
              for m in c.look.members}
    member = listed.get(status.member_id)
    if member is None:
        return f"its etcd member {status.member_id} is not in the member list"
    if member.learner:
        return "its etcd member is still a learner"
    top = next((c.look.status for c in controllers if c.look is not None and c.look.status
                is not None and c.look.status.member_id == status.leader), None)
    if top is None:
        return f"the etcd leader {status.leader} could not be read"
    lag = top.applied_index - status.applied_index
    if lag > bound:
        return f"its etcd member is {lag} entries behind the leader"
    return None
