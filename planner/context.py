"""What a plan run knows: the config, each host's state as phases learn it, and problems.

Phases record findings (what they saw, per host) and problems (what is wrong). A host
with an error drops out of later phases, but the run goes on for the others, so every
problem of the cluster is reported together.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .config.model import ClusterConfig, HostConfig
from .errors import HostError
from .hosts.pool import parallel
from .plan.hostref import HostRef

# Only named in annotations: a run reaches its first dial before it needs these modules
# (connecting.py), so the context does not load them.
if TYPE_CHECKING:
    from .configurers import Configurer
    from .facts.distro import EngineFacts
    from .facts.engine_config import EngineSettings
    from .facts.network import Network
    from .facts.os_release import Kernel, OsRelease
    from .facts.system import Privilege
    from .hosts.batch import Fact
    from .hosts.early import EarlySessions
    from .hosts.reader import HostReader
    from .hosts.ssh import ConnectOptions
    from .kube import ApiFactory
    from .kube_core import CoreV1
    from .plan.model import KeyChange
    from .startup import Startup


@dataclass
class HostState:
    config: HostConfig
    reader: HostReader | None = None
    os: OsRelease | None = None
    kernel: Kernel | None = None
    init_system: str | None = None
    configurer: Configurer | None = None
    hostname: str | None = None  # as cargoship names the host (a config override wins)
    os_hostname: str | None = None  # as the host reports it: what the engine names nodes by
    network: Network | None = None
    private_interface: str | None = None
    private_address: str | None = None
    privilege: Privilege | None = None
    engine: EngineFacts | None = None
    engine_settings: EngineSettings | None = None  # its config.yaml(.d), merged
    node_name: str | None = None  # the Kubernetes node, named as the engine names it
    host_key: str | None = None  # SHA256 fingerprint seen at connect
    error: str | None = None  # set when the host dropped out of the run

    @property
    def ref(self) -> HostRef:
        """The host as plans, records and JSON name it: identified by address and port."""
        ssh = self.config.ssh
        return HostRef(self.hostname or self.config.hostname or ssh.address, ssh.address,
                       ssh.port or 22)

    @property
    def addresses(self) -> frozenset[str]:
        """Every address this host has: its interfaces', its SSH address, the engine's
        node-ip, its private address. Its node's InternalIP must be one of them."""
        found = {self.config.ssh.address}
        if self.network:
            found |= {a.address for a in self.network.addresses}
        if self.engine_settings:
            found |= {ip.split(",")[0].strip() for ip in self.engine_settings.list_of("node-ip")}
        if self.private_address:
            found.add(self.private_address)
        return frozenset(found)

    @property
    def node(self) -> str:
        """The Kubernetes node to drain and label: as the engine names it (its node-name,
        else the lowercased hostname), known once the distro facts were gathered."""
        return self.node_name or (self.os_hostname or self.hostname or self.config.label).lower()

    @property
    def label(self) -> str:
        return str(self.ref)

    @property
    def active(self) -> bool:
        return self.reader is not None and self.error is None


@dataclass(frozen=True)
class Finding:
    phase: str
    # Index into PlanContext.hosts (None: about the cluster as a whole). An index, not a
    # label, so the report names a host the same way throughout, even for findings made
    # before its hostname was known.
    host: int | None
    text: str
    action: str | None = None  # unassessed items: what would be planned (plan/actions.py)


@dataclass(frozen=True)
class PlannedChange:
    phase: str
    host: int | None  # index into PlanContext.hosts; None for the local machine
    action: str  # one of planner.plan.actions.ACTIONS
    target: str
    before: str | None
    after: str | None
    diff: str
    node: str | None = None  # label-node
    label: str | None = None  # label-node
    context: str | None = None  # merge-kubeconfig
    key_changes: tuple[KeyChange, ...] = ()  # by key path, for YAML file changes
    # Whether the node is drained before the restart: options.drain.when's answer for this
    # file (desired/drain_policy.py); None: as the action says.
    drain_first: bool | None = None

    @property
    def drain(self) -> bool:
        from .plan.actions import ACTIONS

        spec = ACTIONS[self.action]
        return spec.drain and (self.drain_first is None or self.drain_first)

    @property
    def restart(self) -> bool:
        from .plan.actions import ACTIONS

        return ACTIONS[self.action].restart


def _official_client(kubeconfig: dict[str, Any]) -> CoreV1:
    """planner.kube's official client, its module loaded once a phase talks to the API."""
    from .kube import official_client

    return official_client(kubeconfig)


@dataclass
class PlanContext:
    config: ClusterConfig
    connect_options: ConnectOptions
    hosts: list[HostState]
    findings: list[Finding] = field(default_factory=list)
    problems: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    unassessed_items: list[Finding] = field(default_factory=list)
    changes: list[PlannedChange] = field(default_factory=list)
    # Salts every digest of host content in this plan (secrets live in some of it).
    salt: bytes = field(default_factory=lambda: secrets.token_bytes(16))
    # What each host's reads returned, by target: the plan's fingerprints for drift checks.
    reads: dict[int, dict[str, str]] = field(default_factory=dict)
    # Remote commands run per phase and host (index): what `plan --stats` reports.
    round_trips: dict[str, dict[int, int]] = field(default_factory=dict)
    # What the run's phases will read from a host, (fact, as_root): the Connect phase reads
    # it all in one exec (hosts/snapshot.py). None: no snapshot, each phase reads itself.
    prefetch: Callable[[HostState], list[tuple[Fact[Any], bool]]] | None = None
    activity: str = "starting"  # what the run is doing now, for progress lines
    # Builds the Kubernetes API client from a kubeconfig dict; tests may hand in another.
    kube_api: ApiFactory = _official_client
    # The plan an apply is checking drift for: its own records (an interrupted run of it)
    # are not "another plan applied since" (planner.facts.applied).
    applying: str | None = None
    # Whether controller restarts are gated on etcd quorum (planner/facts/etcd_gate.py):
    # False for one controller, an external datastore or no embedded etcd. None: not judged.
    etcd_gated: bool | None = None
    # How Connect reaches a host when the caller already holds a session to it (an apply's
    # drift check: a second connection per host would double what the hosts, and a
    # bastion, take). Those sessions stay open at the end of the run: they are the
    # caller's to close. None: Connect opens a session per host and the run closes it.
    held_sessions: Callable[[HostConfig], HostReader] | None = None
    # Process start to the first dial (connecting.begin), and to the phases loaded (the
    # caller's, once it has them): what `plan --stats` reports as start-up. None until then.
    startup: Startup | None = None
    loaded: Startup | None = None
    # The hosts' handshakes once begun (connecting.begin), until phase 1 takes them.
    handshakes: EarlySessions | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def create(cls, config: ClusterConfig, connect_options: ConnectOptions,
               held_sessions: Callable[[HostConfig], HostReader] | None = None,
               ) -> PlanContext:
        return cls(config, connect_options, [HostState(h) for h in config.hosts],
                   held_sessions=held_sessions)

    def label(self, finding: Finding) -> str | None:
        return None if finding.host is None else self.hosts[finding.host].label

    def active_hosts(self) -> list[HostState]:
        return [h for h in self.hosts if h.active]

    def found(self, phase: str, host: HostState | None, text: str) -> None:
        with self._lock:
            self.findings.append(Finding(phase, _index(host), text))

    def problem(self, phase: str, host: HostState | None, text: str) -> None:
        with self._lock:
            self.problems.append(Finding(phase, _index(host), text))

    def warn(self, phase: str, host: HostState | None, text: str) -> None:
        with self._lock:
            self.warnings.append(Finding(phase, _index(host), text))

    def unassessed(self, phase: str, host: HostState | None, reason: str,
                   action: str | None) -> None:
        with self._lock:
            self.unassessed_items.append(Finding(phase, _index(host), reason, action))

    def change(self, change: PlannedChange) -> None:
        with self._lock:
            self.changes.append(change)

    def record_read(self, host: HostState, target: str, fingerprint: str) -> None:
        with self._lock:
            self.reads.setdefault(host.config.index, {})[target] = fingerprint

    def count_round_trips(self, phase: str, host: HostState, count: int) -> None:
        with self._lock:
            per_host = self.round_trips.setdefault(phase, {})
            per_host[host.config.index] = per_host.get(host.config.index, 0) + count

    def fail_host(self, phase: str, host: HostState, text: str) -> None:
        """Record a problem that makes the host unusable for the rest of the run."""
        self.problem(phase, host, text)
        host.error = text

    def gather(
        self,
        phase: str,
        facts_for: Callable[[HostState], Sequence[Fact[Any]]],
        *,
        as_root: bool = False,
        hosts: Sequence[HostState] | None = None,
    ) -> list[tuple[HostState, list[Any]]]:
        """Gather each host's facts (default: all active hosts) in one round trip per host,
        hosts in parallel. Hosts whose reads fail drop out with a problem; the rest are
        returned in config order.
        """
        hosts = [h for h in (self.active_hosts() if hosts is None else hosts) if h.active]
        wanted: dict[int, Sequence[Fact[Any]] | Exception] = {}
        for host in hosts:
            try:
                wanted[host.config.index] = facts_for(host)
            except Exception as exc:  # noqa: BLE001 - that host's problem, reported below
                wanted[host.config.index] = exc

        def read(host: HostState) -> list[Any]:
            assert host.reader is not None
            facts = wanted[host.config.index]
            if isinstance(facts, Exception):
                raise facts
            before = host.reader.round_trips
            try:
                return host.reader.gather(facts, as_root=as_root)
            finally:
                self.count_round_trips(phase, host, host.reader.round_trips - before)

        def in_memory(host: HostState) -> bool:
            facts = wanted[host.config.index]
            return isinstance(facts, Exception) or (
                host.reader is not None and host.reader.answered(facts, as_root=as_root))

        # Hosts answered from their snapshots are parsed right here, one after another:
        # that is CPU alone, and a thread per host only added its start-up and handoffs.
        answered = {h.config.index: in_memory(h) for h in hosts}
        local = [h for h in hosts if answered[h.config.index]]
        remote = [h for h in hosts if not answered[h.config.index]]
        by_index: dict[int, list[Any] | Exception] = {}
        for host in local:
            try:
                by_index[host.config.index] = read(host)
            except Exception as exc:  # noqa: BLE001 - reported as that host's problem
                by_index[host.config.index] = exc
        for host, outcome in zip(remote, parallel(remote, read,
                                                  self.config.options.host_concurrency),
                                 strict=True):
            by_index[host.config.index] = outcome
        results = [by_index[h.config.index] for h in hosts]
        gathered: list[tuple[HostState, list[Any]]] = []
        for host, result in zip(hosts, results, strict=True):
            if isinstance(result, Exception):
                self.fail_host(phase, host, _reason(result))
            else:
                gathered.append((host, result))
        return gathered


def _index(host: HostState | None) -> int | None:
    return None if host is None else host.config.index


def _reason(exc: Exception) -> str:
    if isinstance(exc, HostError):
        return exc.message
    return f"{type(exc).__name__}: {exc}"
