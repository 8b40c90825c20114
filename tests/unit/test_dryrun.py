"""The dry-run runner runs only what a phase declared safe; the default is reported, not run."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from planner.config.model import ClusterConfig, Engine, HostConfig, SshConfig
from planner.context import PlanContext
from planner.dryrun import dry_run
from planner.hosts.ssh import ConnectOptions
from planner.phases import DryRun, Phase, engine_config_sync


def _ctx() -> PlanContext:
    config = ClusterConfig(
        path=Path("cluster.yaml"), name="t", engine=Engine("rke2", "v1.30.4+rke2r1"),
        hosts=(HostConfig(0, "controller", SshConfig("10.0.0.1")),),
    )
    return PlanContext.create(config, ConnectOptions())


EXPECTED_PHASES = [
    ("Connect to hosts", "runs, reads only"),
    ("Detect host operating systems", "runs, reads only"),
    ("Acquire exclusive host lock", "reported, not run"),
    ("Gather host facts", "runs, reads only"),
    ("Validate hosts", "runs, reads only"),
    ("Gathering facts about the distro installed", "runs, reads only"),
    ("Sync Registry Config Controller", "reported, not run"),
    ("Sync Registry Config Worker", "reported, not run"),
    ("Updating kubeconfig file with the current cluster", "reported, not run"),
    ("Labeling nodes with their profile group", "reported, not run"),
    ("Release exclusive host lock", "reported, not run"),
    ("Disconnect from hosts", "runs its own dry-run path"),
]


class Recorder(Phase):
    calls: ClassVar[list[str]] = []


class UndeclaredPhase(Recorder):
    """A phase someone adds later and forgets to declare: it must not run in a dry run."""

    title = "Reboot every host"

    def prepare(self, ctx: PlanContext) -> None:
        self.calls.append("prepare")

    def run(self, ctx: PlanContext) -> None:
        self.calls.append("run")


class ReadOnlyPhase(Recorder):
    title = "Read something"
    dry_run = DryRun.RUNS_READ_ONLY

    def run(self, ctx: PlanContext) -> None:
        self.calls.append("read")


def test_undeclared_phase_is_reported_and_never_run() -> None:
    Recorder.calls.clear()
    report = dry_run(_ctx(), [ReadOnlyPhase(), UndeclaredPhase()])
    assert Recorder.calls == ["read", "prepare"]
    assert [(r.title, r.dry_run, r.outcome) for r in report.phases] == [
        ("Read something", DryRun.RUNS_READ_ONLY, "ran"),
        ("Reboot every host", DryRun.REPORTED, "reported"),
    ]


def test_the_twelve_phases_in_order_with_their_declarations() -> None:
    declared = [(p.title, p.dry_run.value) for p in engine_config_sync()]
    assert declared == EXPECTED_PHASES


def test_mutating_phases_have_no_runnable_path_in_the_planner() -> None:
    ctx = _ctx()
    for phase in engine_config_sync():
        if phase.dry_run is DryRun.REPORTED:
            try:
                phase.run(ctx)
            except RuntimeError:
                continue
            raise AssertionError(f"{phase.title} ran inside the planner")


class _NoHost:
    def close(self) -> None:
        return None


class WritesKubeconfig(Phase):
    title = "Write a cluster-wide thing"

    def assess(self, ctx: PlanContext, hosts):  # type: ignore[no-untyped-def]
        return {(None, "kubeconfig"), (0, "node")}


class ReadsKubeconfig(Phase):
    title = "Read the cluster-wide thing"
    assessed: ClassVar[list[int]] = []

    def cluster_reads(self, ctx: PlanContext) -> frozenset[str]:
        return frozenset({"kubeconfig"})

    def assess(self, ctx: PlanContext, hosts):  # type: ignore[no-untyped-def]
        self.assessed.append(len(hosts))
        return set()


class ReadsNode(Phase):
    title = "Read each node"

    def reads(self, ctx: PlanContext, host):  # type: ignore[no-untyped-def]
        return frozenset({"node"})

    def assess(self, ctx: PlanContext, hosts):  # type: ignore[no-untyped-def]
        return set()


def test_unassessed_is_derived_from_reads_and_earlier_writes() -> None:
    ctx = _ctx()
    ctx.hosts[0].reader = _NoHost()  # type: ignore[assignment]  # active; never read here
    ReadsKubeconfig.assessed.clear()
    report = dry_run(ctx, [ReadsNode(), WritesKubeconfig(), ReadsKubeconfig(), ReadsNode()])
    outcomes = [r.outcome for r in report.phases]
    # Reading before the writer is fine; reading after it is unassessed, with the reason.
    assert outcomes == ["no changes", "planned", "unassessed", "unassessed"]
    assert ReadsKubeconfig.assessed == []
    assert [(u.phase, u.host, u.text) for u in ctx.unassessed_items] == [
        ("Read the cluster-wide thing", None,
         "reads the local kubeconfig, which 'Write a cluster-wide thing' would change first"),
        ("Read each node", 0,
         "reads its node object, which 'Write a cluster-wide thing' would change first"),
    ]


class WritesX(Phase):
    title = "A writes x"

    def assess(self, ctx: PlanContext, hosts):  # type: ignore[no-untyped-def]
        return {(h.config.index, "file:/x") for h in hosts}


class ReadsXWritesY(Phase):
    title = "B reads x, writes y"
    assessed: ClassVar[list[int]] = []

    def reads(self, ctx: PlanContext, host):  # type: ignore[no-untyped-def]
        return frozenset({"file:/x"})

    def may_write(self, ctx: PlanContext, host):  # type: ignore[no-untyped-def]
        return frozenset({"file:/y"})

    def assess(self, ctx: PlanContext, hosts):  # type: ignore[no-untyped-def]
        self.assessed.append(len(hosts))
        return {(h.config.index, "file:/y") for h in hosts}


class ReadsY(Phase):
    title = "C reads y"
    assessed: ClassVar[list[int]] = []

    def reads(self, ctx: PlanContext, host):  # type: ignore[no-untyped-def]
        return frozenset({"file:/y"})

    def assess(self, ctx: PlanContext, hosts):  # type: ignore[no-untyped-def]
        self.assessed.append(len(hosts))
        return set()


def test_unassessed_is_transitive() -> None:
    ctx = _ctx()
    ctx.hosts[0].reader = _NoHost()  # type: ignore[assignment]
    ReadsXWritesY.assessed.clear()
    ReadsY.assessed.clear()
    report = dry_run(ctx, [WritesX(), ReadsXWritesY(), ReadsY()])
    assert [r.outcome for r in report.phases] == ["planned", "unassessed", "unassessed"]
    assert ReadsXWritesY.assessed == [] and ReadsY.assessed == []
    assert [(u.phase, u.text) for u in ctx.unassessed_items] == [
        ("B reads x, writes y", "reads /x, which 'A writes x' would change first"),
        ("C reads y", "reads /y, which 'B reads x, writes y' may change first (it could not "
                      "be assessed either)"),
    ]


def test_without_the_first_writer_nothing_is_unassessed() -> None:
    ctx = _ctx()
    ctx.hosts[0].reader = _NoHost()  # type: ignore[assignment]
    ReadsY.assessed.clear()
    report = dry_run(ctx, [ReadsXWritesY(), ReadsY()])
    assert [r.outcome for r in report.phases] == ["planned", "unassessed"]
    # B assessed and said it writes y: C is unassessed by B's real write, not a guess.
    assert ctx.unassessed_items[-1].text == "reads /y, which 'B reads x, writes y' would " \
                                            "change first"
