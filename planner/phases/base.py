"""The phase protocol.

A phase is a title plus declarations; every hook is optional. What a dry run (a plan) does
with a phase is decided only by its `dry_run` declaration, and the default is REPORTED:
a phase that declares nothing is never run by a dry run, so a phase added later is safe.

Hooks, all read-only in the planner:
    prepare(ctx)        learn what the phase needs (every phase, reported ones included)
    run(ctx)            the phase's work; a dry run calls it only for RUNS_READ_ONLY phases
    dry_run_path(ctx)   a phase's own dry-run behaviour (RUNS_OWN_DRY_RUN_PATH)
    reads(ctx, host)    what assessing this phase reads on a host ("file:/etc/x", "node"...)
    cluster_reads(ctx)  what it reads that belongs to no host ("kubeconfig:local")
    assess(ctx, hosts)  reported phases: record what the phase would do for these hosts
                        (changes and findings on ctx) and return what it would write
    prefetch(ctx, host) the facts (fact, as_root) the phase will gather from a host, known
                        from the config alone: read with every other phase's in one
                        exec right after connecting (hosts/snapshot.py)
    may_write(ctx, host)     what the phase could write on a host, unassessed: by default
    cluster_may_write(ctx)   what it reads (a phase that can't look can't rule out changing
                             what it would have looked at)

From reads and writes the runner derives, generically, which hosts a phase cannot be
assessed for: those where it reads something an earlier reported phase would write, or
*might* write because that phase could not be assessed there either (transitively: A
writes x; B reads x, so B is unassessed and may write y; C reads y, so C is too).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any, ClassVar

from ..context import HostState, PlanContext
from ..hosts.batch import Fact

# (host index, what) or (None, what) for something that belongs to no host.
Resource = tuple[int | None, str]


class DryRun(enum.Enum):
    RUNS_READ_ONLY = "runs, reads only"
    REPORTED = "reported, not run"
    RUNS_OWN_DRY_RUN_PATH = "runs its own dry-run path"


class PhaseNotRunnable(RuntimeError):
    """A runner tried to run a phase in a way the phase never declared safe."""


class Phase:
    title: ClassVar[str]  # for people: no code decides anything by it
    dry_run: ClassVar[DryRun] = DryRun.REPORTED
    # The action (plan/actions.py) this phase would plan where it can't be assessed: what
    # an unassessed item of it asks the executor to finish. None: nothing can finish it.
    unassessed_action: ClassVar[str | None] = None

    def prepare(self, ctx: PlanContext) -> None:
        return None

    def run(self, ctx: PlanContext) -> None:
        raise PhaseNotRunnable(f"phase {self.title!r} has no read-only run")

    def dry_run_path(self, ctx: PlanContext) -> None:
        raise PhaseNotRunnable(f"phase {self.title!r} has no dry-run path")

    def prefetch(self, ctx: PlanContext, host: HostState) -> list[tuple[Fact[Any], bool]]:
        return []

    def reads(self, ctx: PlanContext, host: HostState) -> frozenset[str]:
        return frozenset()

    def cluster_reads(self, ctx: PlanContext) -> frozenset[str]:
        return frozenset()

    def may_write(self, ctx: PlanContext, host: HostState) -> frozenset[str]:
        return self.reads(ctx, host)

    def cluster_may_write(self, ctx: PlanContext) -> frozenset[str]:
        return self.cluster_reads(ctx)

    def would(self, ctx: PlanContext, host: HostState | None) -> str | None:
        """Opt-in: what this phase would do for `host` (None: the cluster) where it can't be
        assessed, in words a reviewer signs ("set node-role.kubernetes.io/edge=true on node
        wrk-1"): an unassessed item says it, so a signature covers it. None: say nothing."""
        return None

    def assess(self, ctx: PlanContext, hosts: Sequence[HostState]) -> set[Resource] | None:
        """None: this phase has no assessment (it is reported as is)."""
        return None
