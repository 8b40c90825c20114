"""The hosts stage: every host action of the plan, one job per host, run as one rollout.

The rollout (executor/rollout.py, each host's flow in host_flow.py) does the ordering,
draining, restarting and rolling back; the handlers only say what each change adds to its
host's job.
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.api_server import host_address
from planner.desired.engine_files import placement_of, wanted_files
from planner.facts.distro import LAYOUTS
from planner.facts.etcd_gate import external_datastore
from planner.plan.model import Change

from ..drain import NodeOps
from ..drain_pods import DrainOptions
from ..host_job import HostJob, HostOutcome
from ..mirror_pod import mirror_reader
from ..quorum import Controller, Looks, make_back_check, make_gate
from ..readiness import apiserver_manifest, point_at, readyz_probe
from ..rollout import Rollout
from .base import ApplyEnv, HostHandler, ItemResult
from .registry import HANDLERS


def host_jobs(env: ApplyEnv, changes: Sequence[Change]) -> dict[str, list[HostJob]]:
    """Jobs by role, in config order; refuses (ApplyRefused) a change no job can take."""
    layout = LAYOUTS[env.config.engine.distro]
    jobs: dict[str, list[HostJob]] = {"controller": [], "worker": []}
    for host in env.ctx.hosts:
        mine = [c for c in changes if c.host is not None and c.host.key == host.ref.key]
        if not mine:
            continue
        role = host.config.role
        job = HostJob(label=host.label, node=host.node,
                      writer=env.writers[host.ref.key], init=host.init_system or "unknown",
                      service=layout.service(role), controller=role == "controller",
                      addresses=host.addresses)
        if host.engine_settings is not None:
            job.apiserver_manifest = apiserver_manifest(host.engine_settings.data_dir(layout))
        # Where this host's engine reads them, as the plan found (a move since is drift).
        where = placement_of(host.engine_settings, layout)
        wanted = wanted_files(env.config, role, where, [c.target for c in mine])
        for change in mine:
            handler = HANDLERS[change.action]
            assert isinstance(handler, HostHandler)
            handler.shape(job, change, wanted)
        jobs[role].append(job)
    _probe_api_servers(env, jobs["controller"])
    return jobs


def _probe_api_servers(env: ApplyEnv, controllers: Sequence[HostJob]) -> None:
    """A restarted controller is ready when its own API server says so (/readyz, etcd
    included), not when its node merely posts status: ask each one directly."""
    restarting = [job for job in controllers if job.restart]
    admin = env.admin() if restarting else None
    if admin is None:
        return
    # Each controller's own API server, at an address its certificate covers.
    address = {host.label: host_address(host) for host in env.ctx.hosts}
    for job in restarting:
        job.readyz = readyz_probe(admin, address[job.label])
    if env.config.engine.distro != "rke2":
        return  # k3s serves its API inside its own process: no static pod to be stale
    servers = [address[h.label] for h in env.ctx.hosts if h.config.role == "controller"]
    for job in restarting:
        # Through the other controllers first: this one's API server is the one in doubt.
        own = address[job.label]
        job.mirror = mirror_reader(admin, [a for a in servers if a != own] + [own],
                                   job.node, point_at)


def _controllers(env: ApplyEnv) -> list[Controller]:
    """Every controller of the cluster, changing or not: the quorum gate reads them all
    (not at all where the apply's own preflight found nothing to gate: one controller, an
    external datastore, no embedded etcd)."""
    layout = LAYOUTS[env.config.engine.distro]
    return [Controller(h.label, env.writers[h.ref.key], h.init_system or "auto",
                       h.engine_settings.data_dir(layout) if h.engine_settings else None)
            for h in env.ctx.hosts
            if h.config.role == "controller" and h.ref.key in env.writers]


def _external(env: ApplyEnv) -> bool:
    return external_datastore(h.engine_settings.merged for h in env.ctx.hosts
                              if h.config.role == "controller" and h.engine_settings)


def run_hosts_stage(env: ApplyEnv, changes: Sequence[Change],
                    jobs: dict[str, list[HostJob]]) -> tuple[list[HostOutcome], list[ItemResult]]:
    o = env.config.options
    api = env.api() if any(j.restart for js in jobs.values() for j in js) else None
    ops = NodeOps(api, others=env.other_apis()) if api is not None else None
    rollout = Rollout(ops, env.plan.plan_id,
                      DrainOptions(timeout=float(o.drain_timeout),
                                   grace_period=o.drain_grace_period,
                                   delete_emptydir_data=o.drain_delete_emptydir_data,
                                   force=o.drain_force,
                                   retry_interval=env.waits.drain_retry),
                      float(o.ready_timeout), env.progress, stop=env.stop,
                      locks_lost=env.locks_lost, waits=env.waits)
    if env.ctx.etcd_gated is not False:
        looks = Looks(_controllers(env), env.config.engine.distro)
        rollout.gate = make_gate(looks, _external(env))
        rollout.back = make_back_check(looks, float(o.ready_timeout))
    env.escalations.append(rollout.interrupt_now)
    outcomes = rollout.run(jobs["controller"], jobs["worker"], o.worker_concurrency)
    by_label = {outcome.host: outcome for outcome in outcomes}
    # By address and port: the name a host has now may not be the one it had at plan time.
    label_of = {host.ref.key: host.label for host in env.ctx.hosts}
    results = []
    for change in changes:
        assert change.host is not None
        outcome = by_label.get(label_of.get(change.host.key, ""))
        if outcome is None:
            results.append(ItemResult(change, "not done", "host not reached"))
        elif outcome.status == "applied":
            results.append(ItemResult(change, "done"))
        elif outcome.status == "not started":
            results.append(ItemResult(change, "not done", outcome.detail))
        else:
            results.append(ItemResult(change, "failed", f"{outcome.status}: {outcome.detail}"))
    return outcomes, results
