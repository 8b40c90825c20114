"""How an apply ends, for people: each host's outcome, then one summary line, and on a
failure what every host of the plan is left with (so nobody has to work it out from the
rollout's log). Kept apart from the CLI so any front end can print the same ending."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from planner.render import printable

# What a host whose rollout ended this way runs now.
LEFT_WITH = {
    "applied": "the new config",
    "rolled back": "its previous config (rolled back), engine running",
    "not started": "its previous config, untouched",
}


def log_lines(log: Any) -> list[str]:
    """A failed host's log lines under its outcome line, indented: as apply ends and as
    `show RECORD` shows it."""
    if not isinstance(log, list | tuple):
        return []
    return [f"      {line}" for line in log if isinstance(line, str)]


def host_counts(statuses: Sequence[str], restarts: int | None) -> list[str]:
    """The summary's counts, as apply ends and as `show RECORD` shows them: hosts changed,
    engine restarts as they happened (a rollback's included; None: an older record that
    did not count them), then each other status that occurred."""
    counts = [f"{sum(1 for s in statuses if s == 'applied')} host(s) changed",
              f"{restarts} engine restart(s)" if restarts is not None
              else "engine restarts not recorded"]
    for status in ("rolled back", "failed", "not started", "in progress", "unknown"):
        n = sum(1 for s in statuses if s == status)
        if n:
            counts.append(f"{n} {status}")
    unchanged = sum(1 for s in statuses if s == "unchanged")
    if unchanged:
        counts.append(f"{unchanged} unchanged")
    return counts


def apply_outcome_lines(result: Any, seconds: float) -> list[str]:
    """`result`: an executor.apply_result.ApplyResult (plan, hosts as (HostRef, HostOutcome),
    after_rollout, notes, warnings, ok, interrupted)."""
    changed = [(ref, o) for ref, o in result.hosts if o.status != "unchanged"]
    lines = []
    for ref, outcome in changed:
        detail = f": {outcome.detail}" if outcome.detail else ""
        lines.append(f"  {ref}: {outcome.status}{detail}")
        lines += log_lines(getattr(outcome, "log", ()))
    for item in result.after_rollout:  # labels, the kubeconfig: not a host's outcome
        what = getattr(item.item, "target", None) or "(unassessed in the plan)"
        lines.append(f"  {item.item.host or 'local'}: {item.item.action} {what}: "
                     f"{item.status}" + (f" ({item.detail})" if item.detail else ""))
    lines += [f"  warning: {warning}" for warning in result.warnings]
    # What happened, not what was planned: a rollback's restart counts too.
    counts = host_counts([o.status for _, o in result.hosts],
                         sum(getattr(o, "restarts", 0) for _, o in result.hosts))
    # A cluster step failing after the rollout: the hosts were changed all the same.
    counts += [f"step {action} failed" for action in dict.fromkeys(
        i.item.action for i in result.after_rollout if i.status == "failed")]
    verdict = "Apply complete" if result.ok else (
        "Apply interrupted" if result.interrupted else "Apply FAILED")
    lines.append("")
    lines.append(f"{verdict} after {seconds:.1f}s: {', '.join(counts)}.")
    if not result.ok:
        lines.append("Each host is left with:")
        for ref, outcome in result.hosts:
            if outcome.status == "unchanged":
                left = "its config as it was (nothing to change there)"
            elif outcome.status in LEFT_WITH:
                left = LEFT_WITH[outcome.status]
            else:  # failed: what is where, or else the rollout's whole detail
                left = getattr(outcome, "left", "") or outcome.detail \
                    or "unknown: check the host"
            lines.append(f"  {ref}: {left}")
    return [printable(line) for line in lines]
