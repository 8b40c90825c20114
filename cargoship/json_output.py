"""What the commands print with --json: one JSON document on stdout, for scripts.

Each document has a JSON Schema in schemas/ (the README's table of --json output names
it); hosts appear in them as {"name", "address", "port"} (null for the cluster or the
local machine). Errors stay
one line on stderr; `apply --json` and `validate --json` also say on stdout that they
refused, so a script reading stdout always gets a document.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.config import ClusterConfig
from planner.errors import Problem
from planner.history import PlanHistory
from planner.plan.model import HostRef
from planner.safetext import json_escaped

if TYPE_CHECKING:  # the executor brings the Kubernetes client: imported only to apply
    from executor.apply_result import ApplyResult

def emit(data: Any) -> None:
    # Host text may carry terminal escapes or bidi overrides: escaped, never written raw.
    sys.stdout.write(json_escaped(json.dumps(data, indent=2, sort_keys=True,
                                             ensure_ascii=False)) + "\n")
    sys.stdout.flush()


def host(ref: HostRef | None) -> dict[str, Any] | None:
    return None if ref is None else {"name": ref.name, "address": ref.address,
                                     "port": ref.port}


def apply_result(result: ApplyResult) -> dict[str, Any]:
    """The outcome per host and per change, where the record is, how long it took."""
    from executor.apply_result import record_of

    record = record_of(result.plan, result)
    return {"plan_id": result.plan.plan_id, "outcome": result.outcome, "ok": result.ok,
            "interrupted": result.interrupted, "resumed": result.resumed,
            "record": str(result.record) if result.record else None,
            "duration_seconds": result.seconds, "restarts": result.restarts,
            "hosts": record["hosts"],
            "changes": record["changes"], "notes": result.notes, "warnings": result.warnings,
            "error": None}


def apply_refused(plan_file: Path, plan_id: str | None, error: str) -> dict[str, Any]:
    return {"plan_id": plan_id, "outcome": "refused", "ok": False, "interrupted": False,
            "resumed": False, "record": None, "duration_seconds": None, "restarts": 0,
            "hosts": [],
            "changes": [], "notes": [], "warnings": [], "error": error,
            "plan_file": str(plan_file)}


def history(config: ClusterConfig, entries: list[PlanHistory], pending: int | None,
            problems: list[str]) -> dict[str, Any]:
    return {
        "cluster": config.name,
        "plans": [{
            "plan_id": e.plan_id, "state": e.state, "applied_at": e.applied_at,
            "applied_by": e.applied_by, "signers": e.signers,
            "interrupted": e.interrupted, "duration_seconds": e.duration_seconds,
            "verified": e.verified, "unverified_because": e.unverified_because,
            "hosts": [{"host": host(ref), "status": status}
                      for ref, status in sorted(e.outcomes.items(), key=lambda i: i[0].key)],
            "changes": e.changes,
        } for e in entries],
        # None when the hosts could not be planned (problems says why).
        "hosts_match": None if pending is None else pending == 0,
        "pending_changes": pending,
        "problems": problems,
    }


def validate(path: Path, config: ClusterConfig | None,
             problems: list[Problem]) -> dict[str, Any]:
    return {
        "config": str(path), "valid": config is not None,
        "cluster": config.name if config else None,
        "distro": config.engine.distro if config else None,
        "version": config.engine.version if config else None,
        "hosts": [{"name": h.label, "address": h.ssh.address, "port": h.ssh.port or 22,
                   "role": h.role} for h in config.hosts] if config else [],
        "errors": [{"where": p.where, "path": p.path, "message": p.message}
                   for p in problems],
    }
