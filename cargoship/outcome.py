"""How an apply ends, for people: each host's outcome, then one summary line, and on a
failure what every host of the plan is left with (so nobody has to work it out from the
rollout's log). Kept apart from the CLI so any front end can print the same ending."""

from __future__ import annotations

from typing import Any

from planner.render import printable

# What a host whose rollout ended this way runs now.
LEFT_WITH = {
    "applied": "the new config",
    "rolled back": "its previous config (rolled back), engine running",
    "not started": "its previous config, untouched",
}


def apply_outcome_lines(result: Any, seconds: float) -> list[str]:
    """`result`: an executor.apply.ApplyResult (plan, outcomes, notes, warnings, ok,
    interrupted)."""
    plan = result.plan
    restarts = {c.host for c in plan.changes if c.restart}
    by_host = {o.host: o for o in result.outcomes}
    applied = [o.host for o in result.outcomes if o.status == "applied"]
    lines = []
    for outcome in result.outcomes:
        detail = f": {outcome.detail}" if outcome.detail else ""
        lines.append(f"  {outcome.host}: {outcome.status}{detail}")
    lines += [f"  {note}" for note in result.notes]
    lines += [f"  warning: {warning}" for warning in result.warnings]
    restarted = sum(1 for host in applied if host in restarts)
    counts = [f"{len(applied)} host(s) changed", f"{restarted} engine restart(s)"]
    for status in ("rolled back", "failed", "not started"):
        n = sum(1 for o in result.outcomes if o.status == status)
        if n:
            counts.append(f"{n} {status}")
    verdict = "Apply complete" if result.ok else (
        "Apply interrupted" if result.interrupted else "Apply FAILED")
    lines.append("")
    lines.append(f"{verdict} after {seconds:.1f}s: {', '.join(counts)}.")
    if not result.ok:
        lines.append("Each host is left with:")
        for identity in plan.hosts:
            # The label hosts go by in changes and outcomes (planner.plan.build._name).
            name = identity.address if identity.name == identity.address else \
                f"{identity.name} ({identity.address})"
            outcome = by_host.get(name)
            if outcome is None:
                left = "its config as it was (nothing to change there)"
            elif outcome.status in LEFT_WITH:
                left = LEFT_WITH[outcome.status]
            else:  # failed: the rollout's detail says what is where
                left = outcome.detail or "unknown: check the host"
            lines.append(f"  {name}: {left}")
    return [printable(line) for line in lines]
