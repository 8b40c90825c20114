"""6. Gathering facts about the distro installed: engine present? which version? running?
And the engine's own config (config.yaml + config.yaml.d), for the node's name. On
controllers, their etcd members: the quorum gate (etcd_quorum.py) before any restart.

cargoship configures an installed engine; it never installs, upgrades or downgrades one. An
engine that is missing, or at another version than the config pins, is a problem for that
host, said as such, before any run could start anything.
"""

from __future__ import annotations

import re
from typing import Any

from ..context import HostState, PlanContext
from ..facts.distro import LAYOUTS, EngineFacts, engine_fact
from ..facts.engine_config import EngineSettings, engine_config_fact
from ..facts.engine_version import EngineVersion
from ..facts.etcd import etcd_fact
from ..hosts.batch import Fact
from .base import DryRun, Phase
from .etcd_quorum import gate


def _facts(ctx: PlanContext, host: HostState) -> list[Fact[Any]]:
    layout = LAYOUTS[ctx.config.engine.distro]
    # The service's state for whichever init system the host runs ("auto"): the same
    # read whether or not Detect host operating systems has found it yet.
    facts: list[Fact[Any]] = [engine_fact(layout, host.config.role, "auto"),
                              engine_config_fact(layout, host.config.role)]
    if host.config.role == "controller":
        facts.append(etcd_fact(layout))
    return facts


class GatherDistroFacts(Phase):
    title = "Gathering facts about the distro installed"
    dry_run = DryRun.RUNS_READ_ONLY

    def prefetch(self, ctx: PlanContext, host: HostState) -> list[tuple[Fact[Any], bool]]:
        return [(fact, True) for fact in _facts(ctx, host)]

    def run(self, ctx: PlanContext) -> None:
        engine = ctx.config.engine
        pinned = EngineVersion.parse(engine.version)
        # Hosts without root access already dropped out in Validate hosts.
        gathered = ctx.gather(self.title, lambda h: _facts(ctx, h), as_root=True)
        looks = {host.config.index: values[2] for host, values in gathered if len(values) > 2}
        for host, (facts, settings, *_) in gathered:
            host.engine = facts
            host.engine_settings = settings
            verdict, problem = _compare(facts, pinned, engine.distro)
            problem = problem or _settings_problem(host, settings)
            if problem:
                ctx.fail_host(self.title, host, problem)
                continue
            # The engine knows the host's own hostname, not cargoship's override of it.
            name = settings.node_name(host.os_hostname or host.hostname or host.config.label)
            if name is not None and (len(name) > 253 or not NODE_NAME.fullmatch(name)):
                # A host's word goes into API paths and field selectors (spec.nodeName=...):
                # "x,metadata.name!=y" would select other nodes' pods for a drain.
                ctx.fail_host(self.title, host, f"node name {name[:80]!r} is not a valid "
                                                "Kubernetes node name (RFC 1123 subdomain)")
                continue
            host.node_name = name
            # Where the engine's settings come from when not from the defaults: said, so
            # a reader can check the plan reads what the engine reads.
            moved = settings.moved(LAYOUTS[engine.distro])
            ctx.found(self.title, host, f"{verdict}, node {host.node_name}"
                      + "".join(f"; {m}" for m in moved))
        _unique_nodes(self.title, ctx)
        looks.update(_moved_looks(ctx, self.title))
        gate(ctx, self.title, looks)


def _moved_looks(ctx: PlanContext, title: str) -> dict[int, Any]:
    """The etcd look again on controllers whose engine keeps its data elsewhere
    (`data-dir`): the first look read the default place, where such a host has no
    certificates, and a cluster whose every controller moved it would have read as one
    without embedded etcd, ungated. A second round trip, for those hosts only."""
    layout = LAYOUTS[ctx.config.engine.distro]
    moved = {h.config.index: h.engine_settings.data_dir(layout) for h in ctx.active_hosts()
             if h.config.role == "controller" and h.engine_settings is not None
             and h.engine_settings.data_dir(layout) != layout.data_dir}
    if not moved:
        return {}
    hosts = [h for h in ctx.active_hosts() if h.config.index in moved]
    gathered = ctx.gather(title, lambda h: [etcd_fact(layout, moved[h.config.index])],
                          as_root=True, hosts=hosts)
    return {host.config.index: values[0] for host, values in gathered}


# A Kubernetes node name: an RFC 1123 DNS subdomain (apimachinery IsDNS1123Subdomain).
NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*")


def _unique_nodes(title: str, ctx: PlanContext) -> None:
    """Each host speaks for its own node only. Root on a worker can set `node-name: ctl-1`
    in its engine config: the drain, the readiness wait and the labels of that host would
    then act on ctl-1, a host the plan never shows changing. Two hosts naming one node is a
    problem for both, naming both."""
    owners: dict[str, list[HostState]] = {}
    for host in ctx.hosts:
        if host.node_name:
            owners.setdefault(host.node_name, []).append(host)
    for node, hosts in owners.items():
        if len(hosts) > 1:
            both = " and ".join(h.label for h in hosts)
            for host in hosts:
                ctx.problem(title, host, f"node name {node} is claimed by {both}: each host "
                                         "must run its own node (check node-name in the "
                                         "engine config)")


def _settings_problem(host: HostState, settings: EngineSettings) -> str | None:
    if settings.problems:
        return "the engine's config cannot be read as the engine would: " \
            + "; ".join(settings.problems)
    if settings.with_node_id:
        return ("with-node-id is set: the node's name has a random suffix cargoship cannot "
                "derive, so it cannot drain or label the right node (set node-name)")
    return None


def _compare(facts: EngineFacts, pinned: EngineVersion, distro: str) -> tuple[str, str | None]:
    if facts.other_distro:
        return "", (f"{facts.other_distro} is installed but the config pins {distro}; "
                    "switching engines is not something cargoship does")
    if not facts.installed:
        return "", (f"{distro} is not installed: cargoship configures an installed engine "
                    f"and does not install one (install {distro} {pinned} first)")
    if facts.version is None:
        return "", f"{distro} at {facts.binary}: {facts.version_error}"
    state = f"service {facts.service_state}"
    if facts.version > pinned:
        return "", (f"{distro} {facts.version} is newer than the pinned {pinned}: "
                    f"cargoship does not downgrade engines (pin {facts.version} in "
                    "engine.version if that is the version you run)")
    if facts.version < pinned:
        return "", (f"{distro} {facts.version} is older than the pinned {pinned}: "
                    f"cargoship does not upgrade engines (upgrade it to {pinned} first, or "
                    f"pin {facts.version})")
    return f"{distro} {facts.version} installed (as pinned), {state}", None
