"""Every choice apply will obey that a plan carries, for the reviewer to see.

A plan's desired options decide how apply drains (force, emptyDir data, grace period),
how many workers it restarts at once, how long it waits and what it checks; its secrets'
sources decide which files and variables apply reads and sends to the hosts. None of that
shows in a file diff, and a probe signed a plan whose `drain.force` deleted a pod the honest
plan left alone. So every one of them is listed, by the name the cluster config gives it,
and each value that is not the default is flagged with what it does. Text and markdown
only format what this module decides.

Defaults are this cargoship's (planner.config.model.Options): apply refuses a plan made by
an incompatible version (executor.apply.check_plan), so these are the defaults it has.
A plan states every option, so a default that changes never changes what it does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ..config.model import Options
from ..config.secret_paths import ALLOW_KEY
from ..desired.keys import format_path
from ..facts.distro import LAYOUTS
from ..plan.model import KeyChange, Plan
from ..plan.secret_sources import SecretSource, secret_sources

HEADING = "Apply will, as this plan says"
SECRETS_HEADING = "Secrets apply reads again (where from, never the value)"
# Not in any plan, so not signed with it: what a reviewer should know all the same.
NOT_IN_PLAN = ("Not in the plan: how long apply waits for another run's lock (its own "
               "--lock-timeout, default: not at all), the restart itself (drain, stop, "
               "write, start, wait for fresh readiness, roll back a host that fails), and "
               "the controllers' order: one at a time, as in cluster.yaml, but the one whose "
               "etcd member leads when apply starts goes last")


@dataclass(frozen=True)
class Choice:
    name: str  # as the cluster config spells it under spec.options: "drain.force"
    value: str  # as shown: "true", "300", "each pod's own"
    default: str
    flagged: bool  # not the default
    meaning: str  # what apply does with this value


@dataclass(frozen=True)
class SourceLine:
    where: str  # registries.configs."r.example.com".auth.password
    source: str  # env REG_PASS, file /etc/cargoship/reg-pass
    warning: str | None  # why a reviewer must look (None: an ordinary source)


def _seconds(value: Any) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _bool(value: Any) -> str:
    return "true" if value else "false"


def _grace(value: Any) -> str:
    return "each pod's own" if int(value) < 0 else _seconds(value)


def _force(v: Any, _: dict[str, Any]) -> str:
    return ("evicts pods no controller manages; they are deleted and never recreated"
            if v else "a pod no controller manages stops the drain; it is never deleted")


def _emptydir(v: Any, _: dict[str, Any]) -> str:
    return ("evicts pods with emptyDir volumes; their emptyDir data is deleted" if v else
            "a pod with emptyDir data stops the drain; its data is kept")


def _grace_meaning(v: Any, _: dict[str, Any]) -> str:
    if int(v) < 0:
        return "each evicted pod gets its own terminationGracePeriodSeconds"
    if int(v) == 0:
        return "evicted pods are killed at once, with no time to shut down"
    return f"evicted pods get {_seconds(v)} s to stop, whatever their own grace period says"


def _workers(v: Any, _: dict[str, Any]) -> str:
    return ("workers are drained and restarted one at a time" if int(v) == 1 else
            f"up to {v} workers are drained and restarted at once (their pods evicted "
            "together)")


def _kubeconfig(v: Any, o: dict[str, Any]) -> str:
    if not v:
        return "no local kubeconfig is written"
    context = o.get("kubeconfig_context") or "the cluster's name"
    return (f"merges the cluster's admin credentials into {o.get('kubeconfig_path')} as "
            f"context {context}")


def _server(v: Any, _: dict[str, Any]) -> str:
    return (f"cargoship's own API calls (drains, readiness) and the merged kubeconfig go to "
            f"{v}" if v else "the API server is derived from the admin kubeconfig")


def _when(v: Any, what: str) -> str:
    if v == "never":
        return (f"a node whose {what} restarts its engine in place, never cordoned or "
                "drained (its containers keep running)")
    return f"a node whose {what} is cordoned and drained before its engine restarts"


Meaning = Callable[[Any, dict[str, Any]], str]
# (field of Options, name in the cluster config, how a value is shown, what apply does),
# the drain and rollout first: what can cost data or capacity.
_OPTIONS: tuple[tuple[str, str, Callable[[Any], str], Meaning], ...] = (
    ("drain_force", "drain.force", _bool, _force),
    ("drain_delete_emptydir_data", "drain.deleteEmptyDirData", _bool, _emptydir),
    ("drain_grace_period", "drain.gracePeriodSeconds", _grace, _grace_meaning),
    ("drain_timeout", "drain.timeoutSeconds", _seconds,
     lambda v, _: f"a drain not done in {_seconds(v)} s (PodDisruptionBudgets honoured) "
                  "fails its host and stops the rollout"),
    ("worker_concurrency", "concurrency.workers", str, _workers),
    ("ready_timeout", "readyTimeoutSeconds", _seconds,
     lambda v, _: f"a restarted host not freshly Ready within {_seconds(v)} s is rolled back"),
    ("drain_registries", "drain.when.registries", str,
     lambda v, _: _when(v, "registries.yaml changed")),
    ("drain_control_plane", "drain.when.controlPlane", str,
     lambda v, _: _when(v, "the audit policy, Pod Security config or its drop-in changed")),
    ("host_concurrency", "concurrency.hosts", str,
     lambda v, _: f"up to {v} hosts are connected to and read at once"),
    ("connect_timeout", "ssh.connectTimeoutSeconds", _seconds,
     lambda v, _: f"{_seconds(v)} s to connect to a host; a dropped connection is dialled "
                  f"again for up to {_seconds(max(3 * float(v), 5.0))} s"),
    ("command_timeout", "ssh.commandTimeoutSeconds", _seconds,
     lambda v, _: f"{_seconds(v)} s for each remote command"),
    ("max_clock_skew", "validation.maxClockSkewSeconds", _seconds,
     lambda v, _: f"apply's own preflight refuses a host whose clock is more than "
                  f"{_seconds(v)} s off the median"),
    ("check_firewall", "validation.checkFirewall", _bool,
     lambda v, _: "apply's own preflight checks that firewalls leave the engine's ports "
                  "open" if v else "firewall rules are not checked"),
    ("kubeconfig_enabled", "kubeconfig.enabled", _bool, _kubeconfig),
    ("kubeconfig_server", "kubeconfig.server", lambda v: v or "(derived)", _server),
    ("label_profiles", "labelProfiles", _bool,
     lambda v, _: "labels each node with its profile (node-role.kubernetes.io/PROFILE)"
                  if v else "no node is labelled with its profile"),
)
# Shown inside kubeconfig.enabled's meaning: they do nothing without it.
_PART_OF_OTHERS = frozenset({"kubeconfig_path", "kubeconfig_context"})


def choices(plan: Plan) -> list[Choice]:
    """Every option of the plan that changes what apply does. A field the plan lacks is
    taken at its default, as apply takes it (planner.plan.desired.from_desired)."""
    defaults = {f.name: f.default for f in fields(Options)}
    given = plan.desired.get("options")
    options = {**defaults, **(given if isinstance(given, dict) else {})}
    found = []
    for field, name, shown, meaning in _OPTIONS:
        value, default = options[field], defaults[field]
        found.append(Choice(name, shown(value), shown(default), value != default,
                            meaning(value, options)))
    return found


def listed_fields() -> frozenset[str]:
    """The Options fields this module accounts for (a test holds it to the model)."""
    return frozenset(f for f, *_ in _OPTIONS) | _PART_OF_OTHERS


def sources(plan: Plan) -> list[SourceLine]:
    keys = _key_files(plan)
    return [SourceLine(format_path(s.keys), str(s), _warning(s, keys))
            for s in secret_sources(plan.desired)]


def _key_files(plan: Plan) -> set[str]:
    hosts = plan.desired.get("hosts")
    found: set[str] = set()
    for host in hosts if isinstance(hosts, list) else []:
        ssh = host.get("ssh") if isinstance(host, dict) else None
        bastion = ssh.get("bastion") if isinstance(ssh, dict) else None
        for owner in (ssh, bastion):
            if isinstance(owner, dict) and isinstance(owner.get("key_path"), str):
                found.add(owner["key_path"])
    return found


def _warning(source: SecretSource, key_files: set[str]) -> str | None:
    """Said from the plan alone, never the local disk: `show` is offline, and the files
    are the ones on the machine that will apply it."""
    if source.kind not in ("env", "file", "inline"):
        return f"an unknown kind of source, {source.kind}: apply refuses it"
    if source.kind != "file":
        return None
    what = [why for why, found in (
        ("an SSH key this plan connects with", source.name in key_files),
        ("inside a .ssh directory", ".ssh" in Path(source.name).parts)) if found]
    if source.allow_any_path:
        where = f"although it is {' and '.join(what)}" if what else \
            "wherever it is, even outside the config's directory"
        return f"{ALLOW_KEY}: true, NOT the default: apply reads this file {where}"
    if what:
        return f"it is {' and '.join(what)}: apply refuses it without {ALLOW_KEY}"
    return None


@dataclass(frozen=True)
class SecretNotes:
    """What a secret's key line says beside `"*** (changed)"`: where the new value comes
    from. (Where the old one came from no host knows: hosts keep values, not sources.)"""

    target: str | None  # the registries.yaml of the plan's distro
    by_key: dict[str, str]  # key path in that file -> "from file /p"

    def of(self, target: str, key: KeyChange) -> str | None:
        if target != self.target or key.op == "remove":
            return None
        return self.by_key.get(key.path)


def secret_notes(plan: Plan) -> SecretNotes:
    engine = plan.desired.get("engine")
    layout = LAYOUTS.get(engine.get("distro", "")) if isinstance(engine, dict) else None
    return SecretNotes(layout.registries_path if layout else None,
                       {format_path(s.keys[1:]): f"from {s}"
                        for s in secret_sources(plan.desired) if s.keys[0] == "registries"})
