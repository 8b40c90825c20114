"""Has anything the plan relied on changed since it was made?

The executor re-reads live state by running the planner again (same salt, so digests
compare) and holds the fresh plan against the saved one: the host set, host keys, engine
versions, every fingerprint read, and the changes themselves. Hosts are identified by
address and port: two hosts behind one address are compared each with itself.

Finishing an interrupted apply: hosts that run already finished (`finished`) are held to
having exactly the changes it did not make yet (their files were rewritten on purpose, so
what the plan read there no longer counts), and an item the plan could not assess may
now be planned for them; every other host is checked as usual.
"""

from __future__ import annotations

from collections.abc import Set

from planner.facts.applied import TARGET as APPLIED
from planner.facts.applied import newest_of
from planner.plan.model import Change, HostRef, Plan

HostKey = tuple[str, int]
ChangeKey = tuple[HostKey | None, str, str]  # host, action, target


def change_key(change: Change) -> ChangeKey:
    return (change.host.key if change.host else None, change.action, change.target)


SUPERSEDED = "superseded by plan "


def refusal(saved: Plan, fresh: Plan, *, finished: Set[HostKey] = frozenset(),
            done: Set[ChangeKey] = frozenset()) -> tuple[str, list[str]] | None:
    """Why the plan can't be applied, for people: the deciding reason in one line (a newer
    plan applied over it, above all), then the rest, one line per reason with the hosts
    it holds for. None: nothing changed."""
    found = differences(saved, fresh, finished=finished, done=done)
    if not found:
        return None
    by_text: dict[str, list[HostRef]] = {}
    for host, text in found:
        by_text.setdefault(text, []).extend([host] if host is not None else [])
    newer = [t for t in by_text if t.startswith(SUPERSEDED)]
    if newer:
        lead = newer[0]
        hosts = _names(by_text.pop(lead))
        headline = (f"plan {saved.plan_id} is {lead} (applied to {hosts} after this plan was "
                    "made); nothing was changed: make a new plan (cargoship plan -c "
                    "CLUSTER.yaml -out PLAN.json) and apply that")
    else:
        headline = ("the hosts changed since the plan was made; nothing was changed: make a "
                    "new plan (cargoship plan -c CLUSTER.yaml -out PLAN.json) and apply that")
    rest = [f"{text}" + (f": on {_names(hosts)}" if hosts else "")
            for text, hosts in by_text.items()]
    if len(rest) > MAX_REASONS:
        rest = [*rest[:MAX_REASONS - 1], f"and {len(rest) - MAX_REASONS + 1} more"]
    return headline, rest


MAX_REASONS = 4


def _names(hosts: list[HostRef]) -> str:
    from planner.render.groups import host_list

    names = {h.name for h in hosts}
    # Two hosts of one name (behind one address, by port): each as people see it.
    return host_list([h.name if len(names) == len(set(hosts)) else str(h) for h in hosts])


def differences(saved: Plan, fresh: Plan, *, finished: Set[HostKey] = frozenset(),
                done: Set[ChangeKey] = frozenset()) -> list[tuple[HostRef | None, str]]:
    """Each way `fresh` differs from `saved` that apply must refuse, with the host it is
    of (None: the cluster's)."""
    found: list[tuple[HostRef | None, str]] = []
    before = {h.ref.key: h for h in saved.hosts}
    after = {h.ref.key: h for h in fresh.hosts}
    incomplete = {u.host.key for u in saved.unassessed if u.host is not None}
    for key in sorted(before.keys() - after.keys()):
        found.append((before[key].ref, "no longer in the cluster"))
    for key in sorted(after.keys() - before.keys()):
        found.append((after[key].ref, "new host, not in the plan"))
    for key in sorted(before.keys() & after.keys()):
        old, new = before[key], after[key]
        if old.host_key != new.host_key:
            found.append((old.ref, f"SSH host key changed ({old.host_key} -> {new.host_key})"))
        if key in finished:
            continue
        if old.engine_version != new.engine_version:
            found.append((old.ref, f"engine version changed ({old.engine_version} -> "
                                   f"{new.engine_version})"))
        for target in sorted(old.reads.keys() | new.reads.keys()):
            if target == APPLIED and old.reads.get(target) is None:
                found.append((old.ref, "the plan does not say which plans were applied "
                                       "here when it was made (an older cargoship?)"))
            elif target == APPLIED and old.reads.get(target) != new.reads.get(target):
                newest = newest_of(new.reads.get(target))
                found.append((old.ref, f"{SUPERSEDED}{newest or '(unknown)'}"))
            elif target not in old.reads and key in incomplete and target.startswith("label:"):
                # A node's labels are not read when the plan could not assess them (the
                # node was due a restart): they can't have changed "since"; what the plan
                # would do there is held below, with the changes. Any other new read (a
                # file or a directory that appeared) is drift on any host, as is any new
                # read on a host the plan read in full.
                continue
            elif old.reads.get(target) != new.reads.get(target):
                found.append((old.ref, f"{target} changed since the plan was made"))
    # `before` is what the plan saw (a file digest, a label value, the local kubeconfig).
    left = [c for c in saved.changes if change_key(c) not in done]
    deferred = {(u.host.key if u.host else None, u.action) for u in saved.unassessed}
    now = [c for c in fresh.changes if not (
        finished and (c.host is None or c.host.key in finished)
        and (change_key(c)[0], c.action) in deferred)]
    full = lambda c: (change_key(c), c.before, c.after)  # noqa: E731
    if sorted(map(full, left), key=str) != sorted(map(full, now), key=str) and not found:
        found.append((None, "the changes to make are not the ones planned"))
    if not found:
        found += [(None, text) for text in _edited_text(saved, fresh)]
    return found


def _edited_text(saved: Plan, fresh: Plan) -> list[str]:
    """What a reviewer read must be what this apply would show now: the same changes with
    other diffs mean the plan's text was edited (its digest recomputed), so a harmless-
    looking diff may stand for another change. Never apply past that."""
    shown = {change_key(c): (c.diff, c.key_changes) for c in fresh.changes}
    return [f"{c.host or 'local'}: the diff shown for {c.target} is not what this plan "
            "would do (the plan was edited after it was made); re-plan"
            for c in saved.changes
            if shown.get(change_key(c), (c.diff, c.key_changes)) != (c.diff, c.key_changes)]
