"""Has anything the plan relied on changed since it was made?

The executor re-reads live state by running the planner again (same salt, so digests
compare) and holds the fresh plan against the saved one: the host set, host keys, engine
versions, every fingerprint read, and the changes themselves.
"""

from __future__ import annotations

from planner.facts.applied import TARGET as APPLIED
from planner.facts.applied import newest_of
from planner.plan.model import Plan


def differences(saved: Plan, fresh: Plan) -> list[str]:
    found: list[str] = []
    before = {h.address: h for h in saved.hosts}
    after = {h.address: h for h in fresh.hosts}
    for address in sorted(before.keys() - after.keys()):
        found.append(f"{before[address].name}: no longer in the cluster")
    for address in sorted(after.keys() - before.keys()):
        found.append(f"{after[address].name}: new host, not in the plan")
    for address in sorted(before.keys() & after.keys()):
        old, new = before[address], after[address]
        if old.host_key != new.host_key:
            found.append(f"{old.name}: SSH host key changed ({old.host_key} -> {new.host_key})")
        if old.engine_version != new.engine_version:
            found.append(f"{old.name}: engine version changed ({old.engine_version} -> "
                         f"{new.engine_version})")
        for target in sorted(old.reads.keys() | new.reads.keys()):
            if target == APPLIED and old.reads.get(target) is None:
                found.append(f"{old.name}: the plan does not say which plans were applied "
                             "here when it was made (an older cargoship?)")
            elif target == APPLIED and old.reads.get(target) != new.reads.get(target):
                newest = newest_of(new.reads.get(target))
                found.append(f"{old.name}: another plan ({newest or 'unknown'}) was applied "
                             "here after this plan was made; this plan is superseded")
            elif old.reads.get(target) != new.reads.get(target):
                found.append(f"{old.name}: {target} changed since the plan was made")
    # `before` is what the plan saw (a file digest, a label value, the local kubeconfig).
    key = lambda c: (c.host, c.phase, c.action, c.target, c.before, c.after)  # noqa: E731
    if sorted(map(key, saved.changes), key=str) != sorted(map(key, fresh.changes), key=str) \
            and not found:
        found.append("the changes to make are not the ones planned")
    if not found:
        found += _edited_text(saved, fresh)
    return found


def _edited_text(saved: Plan, fresh: Plan) -> list[str]:
    """What a reviewer read must be what this apply would show now: the same changes with
    other diffs mean the plan's text was edited (its digest recomputed), so a harmless-
    looking diff may stand for another change. Never apply past that."""
    shown = {(c.host, c.target): c.diff for c in fresh.changes}
    return [f"{c.host or 'local'}: the diff shown for {c.target} is not what this plan "
            "would do (the plan was edited after it was made); re-plan"
            for c in saved.changes if shown.get((c.host, c.target), c.diff) != c.diff]
