"""Run phases as a dry run: only what a phase declared safe, everything else reported."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from .context import PlanContext
from .phases.base import DryRun, Phase
from .phases.disconnect import close_all

log = logging.getLogger("cargoship.planner")


@dataclass(frozen=True)
class PhaseRecord:
    number: int
    title: str
    dry_run: DryRun
    outcome: str  # "ran", "ran its dry-run path", "reported"
    assessment: str | None  # for reported phases: what it would do, if assessed
    seconds: float


@dataclass(frozen=True)
class DryRunReport:
    ctx: PlanContext
    phases: tuple[PhaseRecord, ...]
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.ctx.problems


def dry_run(ctx: PlanContext, phases: Sequence[Phase]) -> DryRunReport:
    records: list[PhaseRecord] = []
    started = time.monotonic()
    try:
        for number, phase in enumerate(phases, 1):
            phase_started = time.monotonic()
            phase.prepare(ctx)
            assessment = None
            if phase.dry_run is DryRun.RUNS_READ_ONLY:
                phase.run(ctx)
                outcome = "ran"
            elif phase.dry_run is DryRun.RUNS_OWN_DRY_RUN_PATH:
                phase.dry_run_path(ctx)
                outcome = "ran its dry-run path"
            else:
                assessment = phase.assess(ctx)
                outcome = "reported"
            elapsed = time.monotonic() - phase_started
            log.debug("phase %d %s: %s in %.3fs", number, phase.title, outcome, elapsed)
            records.append(PhaseRecord(number, phase.title, phase.dry_run, outcome, assessment,
                                       elapsed))
    finally:
        # Also on Ctrl-C or a bug: no SSH session outlives the run.
        close_all(ctx)
    return DryRunReport(ctx, tuple(records), time.monotonic() - started)
