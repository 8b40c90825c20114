"""`cargoship plan` and `cargoship engine-config-sync`: a plan made (planner.make), shown,
saved; engine-config-sync --confirm then applies it in the same run."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from cargoship.habits import check_writable, make_dir
from cargoship.heartbeat import heartbeat
from planner.config import load_config
from planner.errors import CargoshipError
from planner.hosts.ssh import ConnectOptions
from planner.make import make_plan

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager

    from planner.dryrun import DryRunReport
    from planner.plan.model import Plan


def plan(args: argparse.Namespace) -> int:
    """plan, and engine-config-sync (--dry-run: the same report, no plan file)."""
    out: Path | None = getattr(args, "out", None)
    if out is not None:
        check_writable(out)  # before any host is contacted
    config = load_config(args.config)
    one_shot = args.command == "engine-config-sync" and not args.dry_run
    if one_shot and not args.confirm:
        raise CargoshipError("engine-config-sync changes hosts: add --confirm to plan and "
                             "apply in one run, or --dry-run to only report")
    options = ConnectOptions(connect_timeout=config.options.connect_timeout,
                             accept_new_host_keys=args.accept_new_host_keys)
    made = make_plan(config, options, watch=_heartbeat)
    _print(args, made.plan, made.report)
    if made.plan.problems:
        if out:
            print(f"cargoship: plan not written to {out}: fix the problems above first",
                  file=sys.stderr)
        return 1
    if one_shot:
        return _apply_now(args, made.plan)
    if out:
        _save(made.plan, out, as_json=getattr(args, "json", False))
    if getattr(args, "detailed_exitcode", False):
        return 2 if made.plan.changes or made.plan.unassessed else 0
    return 0


def _heartbeat(activity: Callable[[], str]) -> AbstractContextManager[None]:
    # Progress lines for logs (CI, a pipe); quiet on a terminal.
    return heartbeat(sys.stderr, activity, enabled=not sys.stdout.isatty())


def _print(args: argparse.Namespace, plan: Plan, report: DryRunReport) -> None:
    from cargoship.show_command import print_plan
    from planner.plan import codec

    if getattr(args, "json", False):
        sys.stdout.write(codec.dumps(plan))
    else:
        print_plan(args, plan)
    if getattr(args, "stats", False):
        from cargoship.stats import render_stats

        sys.stdout.write("\n" + render_stats(report))


def _save(plan: Plan, out: Path, as_json: bool) -> None:
    from planner.plan import codec

    codec.write(plan, out)
    print(f"\nPlan {plan.plan_id} saved to {out}; review it with: cargoship show {out}",
          file=sys.stderr if as_json else sys.stdout)


def _apply_now(args: argparse.Namespace, plan: Plan) -> int:
    """engine-config-sync --confirm: plan and apply in one run through the same code; the
    plan is kept for audit."""
    from cargoship.apply_command import apply

    out = one_shot_dir() / f"{plan.plan_id}.plan.json"
    make_dir(out.parent)
    _save(plan, out, as_json=False)
    if not plan.changes and not plan.unassessed:
        return 0
    args.plan, args.confirm = out, True
    return apply(args)


def one_shot_dir() -> Path:
    """Where engine-config-sync --confirm keeps its plans (and their records): the user's
    state directory, never the working directory (a repository's `.cargoship/` holds what
    CI trusts, such as allowed signers)."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "cargoship" / "plans"
