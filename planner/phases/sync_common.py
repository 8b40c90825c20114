"""What the two Sync Registry Config phases share: assess one role's hosts.

Per host: render the desired files, read the live ones (one round trip, as root), compare
by structure, and plan a create/update/delete per file. A host with any change that needs
a restart is drained and restarted; chart values alone are written in place.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from typing import Any, ClassVar

from ..context import HostState, PlanContext, PlannedChange
from ..desired.compare import FileChange, compare, deletion, file_digest
from ..desired.drain_policy import drains, restarts_in_place
from ..desired.engine_files import (
    OWNED_PREFIX,
    PLACEMENT_READ,
    DesiredFile,
    Placement,
    chart_name,
    default_placement,
    desired_files,
    is_owned,
    owned_paths,
    placement_of,
)
from ..desired.engine_merge import RKE2_KEYS, apiserver_overrides, overridden
from ..facts.applied import APPLIED
from ..facts.applied import TARGET as APPLIED_TARGET
from ..facts.distro import LAYOUTS
from ..facts.engine_config import EngineSettings
from ..facts.file_reads import LiveFile, files_fact
from ..facts.interrupted import INTERRUPTED, MARKER, Interrupted
from ..facts.manifests import DEFAULT_NAMESPACE, ForeignManifests, foreign_charts_fact
from ..hosts.batch import Fact
from ..kube import admin_kubeconfig_path
from ..plan.actions import (
    DELETE_FILE,
    DELETE_FILE_IN_PLACE,
    RECOVER,
    RESTORE_BACKUP,
    WRITE_FILE,
    WRITE_FILE_IN_PLACE,
)
from .admin_access import admin_prefetch
from .base import Phase, Resource
from .chart_removal import removals
from .drain_forecast import forecast


class SyncRolePhase(Phase):
    """The sync phases differ only in the role they serve (and how they roll out, which is
    the executor's business): both assess the same way."""

    role: ClassVar[str]

    def reads(self, ctx: PlanContext, host: HostState) -> frozenset[str]:
        return sync_reads(ctx, host) if host.config.role == self.role else frozenset()

    def prefetch(self, ctx: PlanContext, host: HostState) -> list[tuple[Fact[Any], bool]]:
        if host.config.role != self.role:
            return []
        # Controllers' admin kubeconfigs too: what a drain would meet is asked of the API.
        return [(fact, True) for fact in _facts(ctx, self.role, _placement(ctx, host))] \
            + admin_prefetch(ctx, host)

    def may_write(self, ctx: PlanContext, host: HostState) -> frozenset[str]:
        if host.config.role != self.role:
            return frozenset()
        # Its files, and what a drain and restart change (see assess_role).
        admin = admin_kubeconfig_path(ctx.config.engine.distro)
        return sync_reads(ctx, host) | {"node", f"file:{admin}", f"file:{MARKER}"}

    def assess(self, ctx: PlanContext, hosts: Sequence[HostState]) -> set[Resource]:
        return assess_role(ctx, self.title, self.role, hosts)


def sync_reads(ctx: PlanContext, host: HostState) -> frozenset[str]:
    layout = LAYOUTS[ctx.config.engine.distro]
    where = _placement(ctx, host)
    paths = {f.path for f in desired_files(ctx.config, host.config.role, where)}
    return frozenset({f"file:{p}" for p in paths}
                     | {f"dir:{d}" for d in owned_paths(layout, where)})


def _placement(ctx: PlanContext, host: HostState) -> Placement:
    """Where this host's engine reads cargoship's files (its config, once read)."""
    return placement_of(host.engine_settings, LAYOUTS[ctx.config.engine.distro])


def _facts(ctx: PlanContext, role: str, where: Placement) -> list[Fact[Any]]:
    """What assessing a host of this role reads, as root: its target files and owned
    directories, an interrupted run's marker, its apply records (and on controllers, the
    manifests another HelmChartConfig could be in). Prefetched at the default places; a
    host whose engine moved them is read again, there."""
    layout = LAYOUTS[ctx.config.engine.distro]
    paths = [f.path for f in desired_files(ctx.config, role, where)]
    facts: list[Fact[Any]] = [files_fact(paths, owned_paths(layout, where)), INTERRUPTED,
                              APPLIED]
    if role == "controller":
        facts.append(foreign_charts_fact(where.locations.manifests_dir, OWNED_PREFIX))
    return facts


def assess_role(ctx: PlanContext, phase: str, role: str,
                hosts: Sequence[HostState]) -> set[Resource]:
    ours = [h for h in hosts if h.config.role == role]
    layout = LAYOUTS[ctx.config.engine.distro]
    writes: set[Resource] = set()
    draining: list[tuple[HostState, str]] = []
    gathered = {h.config.index: v for h, v in
                ctx.gather(phase, lambda h: _facts(ctx, role, _placement(ctx, h)),
                           as_root=True, hosts=ours)}
    # One set of desired files per placement, shared by the hosts there: each file renders
    # its bytes once (DesiredFile.content), not once per host (a YAML dump each, ~0.2 ms).
    wanted_at: dict[Placement, list[DesiredFile]] = {}
    for host in ours:
        if host.config.index not in gathered:
            continue  # failed to read: the host has a problem recorded already
        where = _placement(ctx, host)
        if where != default_placement(layout):
            # What the executor writes where: a host that moves them since is drifted.
            ctx.record_read(host, PLACEMENT_READ, where.encode())
        wanted = wanted_at.get(where)
        if wanted is None:
            wanted = wanted_at[where] = desired_files(ctx.config, role, where)
        host_writes, drain_why = _assess_host(ctx, phase, host, where, wanted,
                                              gathered[host.config.index])
        writes |= host_writes
        if drain_why is not None:
            draining.append((host, drain_why))
    forecast(ctx, phase, draining)
    return writes


def _assess_host(ctx: PlanContext, phase: str, host: HostState, where: Placement,
                 wanted: list[DesiredFile], read: list[Any],
                 ) -> tuple[set[Resource], str | None]:
    """One host's changes, recorded in `ctx`: what they write, and why the host would be
    drained (None: it is not, or restarts in place)."""
    (live, listings), interrupted, applied, *foreign = read
    # Not a change: the order apply judges the plan by (no replay of a superseded plan).
    ctx.record_read(host, APPLIED_TARGET, applied.without(ctx.applying).fingerprint)
    irregular = [f for f in live.values() if f.exists and f.kind != "file"]
    for item in irregular:
        ctx.problem(phase, host, f"{item.path} is a {item.kind}, not a regular file: "
                                 "cargoship never reads or writes through links or into "
                                 "special files; make it a regular file (or remove it)")
    if irregular:
        return set(), None
    writes: set[Resource] = set()
    mine = _engine_semantics(ctx, phase, host, wanted, foreign[0] if foreign else None)
    restoring = interrupted is not None and interrupted.rolling_back
    if restoring:
        writes |= _plan_restore(ctx, phase, host, interrupted)
    # A chart left out for a conflict is not "no longer desired": never deleted here.
    changes, stale = _file_changes(ctx, host, mine, live, listings,
                                   owned_paths(LAYOUTS[ctx.config.engine.distro], where),
                                   keep={f.path for f in wanted}, where=where)
    # A chart no longer desired: its manifest emptied first, deleted once pruned.
    changes += removals(ctx, phase, host, where, stale)
    read_at_start, restarting_kinds = _record_changes(ctx, phase, host, changes, wanted,
                                                      where, writes)
    restart = bool(read_at_start)
    if interrupted is not None and not restoring:
        _plan_recovery(ctx, phase, host, interrupted)
        writes.add((host.config.index, f"file:{MARKER}"))
        restart = True
    if restart:
        # Draining cordons the node; restarting rewrites the engine's admin kubeconfig.
        writes |= {(host.config.index, "node"), (host.config.index,
                   f"file:{admin_kubeconfig_path(ctx.config.engine.distro)}")}
    in_place = restarts_in_place(ctx.config.options, restarting_kinds) \
        if interrupted is None and not restoring else None
    if restart and in_place is not None:
        ctx.found(phase, host, f"would restart the engine to read "
                               f"{', '.join(read_at_start)} without cordoning or "
                               f"draining node {host.node} ({in_place})")
        return writes, None
    if not (restart or restoring):
        return writes, None
    why = [f"the engine restarts to read {', '.join(read_at_start)}"] if read_at_start else []
    why += ["the files from before a failed apply are restored"] if restoring else []
    why += ["an interrupted apply is finished"] if interrupted is not None and not restoring \
        else []
    return writes, "; ".join(why)


def _record_changes(ctx: PlanContext, phase: str, host: HostState, changes: list[FileChange],
                    wanted: list[DesiredFile], where: Placement, writes: set[Resource],
                    ) -> tuple[list[str], list[str | None]]:
    """Each file change as a planned change (its writes added to `writes`); the paths the
    engine reads only at start (why it would restart) and their kinds."""
    needs_restart = {f.path for f in wanted if f.restart}
    kinds = {f.path: f.kind for f in wanted}
    read_at_start: list[str] = []
    restarting_kinds: list[str | None] = []
    for change in changes:
        # Chart values are reconciled by the engine; anything else is read at start.
        own = change.path in needs_restart or (
            change.action == "delete"
            and not change.path.startswith(where.locations.manifests_dir))
        if own:
            read_at_start.append(change.path)
            restarting_kinds.append(kinds.get(change.path))
        ctx.change(PlannedChange(phase, host.config.index, _action(change.action, own),
                                 change.path, change.before, change.after, change.diff,
                                 key_changes=change.keys,
                                 drain_first=drains(ctx.config.options, kinds.get(change.path))
                                 if own else None))
        writes.add((host.config.index, f"file:{change.path}"))
    return read_at_start, restarting_kinds


def _plan_recovery(ctx: PlanContext, phase: str, host: HostState,
                   interrupted: Interrupted) -> None:
    """Files may be right and the host still not: its engine may be stopped and its node
    cordoned. Restarting and uncordoning it is what finishes that job."""
    ctx.record_read(host, MARKER, f"plan {interrupted.plan_id}")
    ctx.change(PlannedChange(
        phase, host.config.index, RECOVER, MARKER, None, None,
        f"an apply of plan {interrupted.plan_id} was interrupted on this host (since "
        f"{interrupted.since}): the engine may be stopped and the node cordoned; "
        "would drain, restart the engine and uncordon"))


def _engine_semantics(ctx: PlanContext, phase: str, host: HostState,
                      wanted: list[DesiredFile],
                      foreign: ForeignManifests | None) -> list[DesiredFile]:
    """The files to plan for this host, once checked against how its engine reads them: a
    chart whose HelmChartConfig another manifest also defines is a problem, not written
    (the two would overwrite each other on every reconcile); a drop-in setting a later
    config file overrides is a warning."""
    kept = []
    for desired in wanted:
        if desired.kind == "chart" and foreign is not None:
            name = str(desired.data["metadata"]["name"])
            others = foreign.defining(DEFAULT_NAMESPACE, name)
            if others:
                ctx.problem(phase, host, (
                    f"HelmChartConfig {DEFAULT_NAMESPACE}/{name} is also defined in "
                    f"{', '.join(others)}: the engine would apply both, each overwriting the "
                    f"other; remove that one, or leave {name} out of engineConfig.charts"))
                continue
        if desired.kind == "registries" and host.engine_settings is not None:
            rancher = _rancher_owned(host.engine_settings)
            if rancher:
                ctx.problem(phase, host, (
                    f"{rancher} is rancher-system-agent's: this cluster is managed by "
                    "Rancher, whose agent owns the engine's config drop-in and "
                    f"{desired.path} and rewrites them on every plan it applies; set "
                    "registries in Rancher's cluster config, not in cargoship's"))
                continue
        if desired.kind == "config-dropin" and host.engine_settings is not None:
            # Overrides are problems: the plan would promise a policy the engine ignores.
            distro = ctx.config.engine.distro
            skip = frozenset(RKE2_KEYS) if distro == "rke2" else frozenset()
            for message in [*overridden(list(host.engine_settings.layers), desired.path,
                                        desired.data, skip),
                            *apiserver_overrides(host.engine_settings, distro, desired.path,
                                                 desired.data)]:
                ctx.problem(phase, host, message)
        kept.append(desired)
    if foreign is not None:
        for path in foreign.unreadable:
            ctx.warn(phase, host, f"{path} mentions HelmChartConfig but cannot be read as "
                                  "YAML: cargoship cannot tell whether it defines a chart "
                                  "config it writes too")
    return kept


def _rancher_owned(settings: EngineSettings) -> str | None:
    """The drop-in rancher-system-agent writes on the nodes of a Rancher-provisioned
    cluster (rancher/rancher pkg/capr/planner: config.yaml.d/50-rancher.yaml), if read."""
    return next((path for path, _ in settings.layers
                 if posixpath.basename(path) == "50-rancher.yaml"), None)


def _plan_restore(ctx: PlanContext, phase: str, host: HostState,
                  interrupted: Interrupted) -> set[Resource]:
    """A run stopped while rolling back a failed change (killed, or its rollback failed:
    the marker cannot tell which): the files in place may be the ones that failed, so
    restarting on them (recover) would fail again. Restore the files
    from before that apply first; the desired files, compared as usual, are written after
    it in the same job (if the config still holds the failed change, nothing is)."""
    assert interrupted.backups is not None
    ctx.record_read(host, MARKER, f"plan {interrupted.plan_id}, {interrupted.step}")
    ctx.change(PlannedChange(
        phase, host.config.index, RESTORE_BACKUP, interrupted.backups, None, None,
        f"an apply of plan {interrupted.plan_id} stopped on this host while rolling back a "
        f"failed change (killed, or its rollback failed; since {interrupted.since}): the "
        f"files in place may be the ones that "
        f"failed; would drain, stop the engine, restore the files backed up in "
        f"{interrupted.backups} (those from before that apply), start it and uncordon\n"))
    index = host.config.index
    return {(index, f"file:{MARKER}"), (index, "node"),
            (index, f"file:{admin_kubeconfig_path(ctx.config.engine.distro)}")}


def _action(kind: str, restart: bool) -> str:
    """create/update/delete of a file, and whether the engine must restart to read it."""
    if kind == "delete":
        return DELETE_FILE if restart else DELETE_FILE_IN_PLACE
    return WRITE_FILE if restart else WRITE_FILE_IN_PLACE


def _file_changes(ctx: PlanContext, host: HostState, wanted: list[DesiredFile],
                  live: dict[str, LiveFile], listings: dict[str, list[str]],
                  dirs: Sequence[str], keep: set[str],
                  where: Placement) -> tuple[list[FileChange], list[str]]:
    """The changes of the desired and no longer desired files, and the chart manifests no
    longer desired (their content is read before deciding: chart_removal.py)."""
    changes: list[FileChange] = []
    stale: list[str] = []
    for desired in wanted:
        current = live[desired.path]
        ctx.record_read(host, desired.path, file_digest(current.content, ctx.salt)
                        if current.exists else "absent")
        change = compare(desired, current, ctx.salt)
        if change:
            changes.append(change)
    for directory in dirs:
        for name in listings.get(directory, []):
            path = f"{directory}/{name}"
            if is_owned(name) and path not in keep:
                if chart_name(path, where) is not None:
                    stale.append(path)
                    continue
                ctx.record_read(host, path, "present")
                changes.append(deletion(path))
    return changes, stale
