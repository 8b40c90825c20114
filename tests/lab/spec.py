"""What a lab host is asked to be (HostSpec) and what it became (LabHost)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

DEFAULT_VERSIONS = {"rke2": "v1.30.4+rke2r1", "k3s": "v1.30.4+k3s1"}


@dataclass
class HostSpec:
    name: str  # hostname, e.g. "ctl-1"
    role: str  # "controller" | "worker"
    os: str = "ubuntu-22.04"  # key into osreleases.OS_RELEASES
    user: str = "root"  # ssh user; non-root gets a real account
    sudo: bool = True  # only meaningful for non-root
    engine_version: str | None = None  # None: the lab's pinned version
    engine_installed: bool = True  # False: no engine binary, no engine service
    clock_offset: int = 0  # seconds, via libfaketime in ssh sessions
    # Settings the engine's config.yaml starts with besides the lab's own (node-name,
    # tls-san, kube-apiserver-arg, ...): the engine reads them as rke2/k3s do, and the
    # API certificate covers the tls-san entries as the real ones do.
    engine_config: dict[str, Any] | None = None

    def node_name(self) -> str:
        """The node's name as the engine derives it (no with-node-id)."""
        return str((self.engine_config or {}).get("node-name") or self.name.lower())

    def tls_sans(self) -> list[str]:
        value = (self.engine_config or {}).get("tls-san") or []
        items = value if isinstance(value, list) else str(value).split(",")
        return [str(v).strip() for v in items if str(v).strip()]


@dataclass
class Timing:
    """How the lab's engines and API behave in time. The kubelet's are the real ones (a
    test that needs others sets them and says why); the engine's start is two seconds by
    default, where a real one takes 30-120 s."""

    # Seconds from an engine's start until it is READY: a worker's kubelet posts its node's
    # status then, a controller's half-way (its API server taking the rest). Two at least
    # (__post_init__ says why).
    engine_start: float = 2.0
    # Seconds between the kubelet's heartbeats: its node Lease renewed (kube-node-lease;
    # kubernetes pkg/kubelet/kubelet.go: renewInterval, a quarter of the 40 s lease) and its
    # node's status computed (nodeStatusUpdateFrequency, pkg/kubelet/apis/config/v1beta1/
    # defaults.go: 10 s). The status is posted only when it changed, at the kubelet's start,
    # or `node_status_report` after its last post (kubelet_node_status.go,
    # tryUpdateNodeStatus with NodeLease, GA since 1.17): a running node's Ready condition
    # keeps an old lastHeartbeatTime, and the Lease is what says it is alive.
    kubelet_heartbeat: float = 10.0
    # Seconds without a Lease renewal or a status post before the node reads Unknown: the
    # node lifecycle controller's node-monitor-grace-period (kubernetes
    # pkg/controller/nodelifecycle/config/v1alpha1/defaults.go: 40 s; 50 s from 1.32, and
    # the lab's engines are 1.30).
    node_grace: float = 40.0
    # rke2: seconds from the kubelet up to the API server's manifest written. rke2 writes
    # it only once etcd is available (pkg/executor/staticpod/staticpod.go, APIServer), so
    # for a while the kubelet runs the pod of the manifest already there.
    apiserver_manifest_after: float = 0.0
    # nodeStatusReportFrequency (the same defaults.go as kubelet_heartbeat: 5 minutes).
    node_status_report: float = 300.0

    def __post_init__(self) -> None:
        # A restarted kubelet posts its node's status once, at its start, and then only
        # when it changes; lastHeartbeatTime has whole seconds, so a post within the
        # second of the stop could never say it came after it (executor/readiness.py), and
        # a restart would wait for a post that does not come. A real start (30-120 s)
        # leaves that second far behind; the lab's kubelet posts at half a controller's
        # start (the API server takes the rest), so a start is two seconds at least.
        if self.engine_start < 2:
            raise ValueError(f"engine_start {self.engine_start:g} s: at least 2 s, so that "
                             "a restarted controller's kubelet posts a second or more after "
                             "the stop")

    def to_json(self) -> dict[str, float]:
        return asdict(self)


# Not the kubelet's timings (10 s heartbeats, 40 s grace), for tests that watch nodes
# change within seconds (a stopped one reading Unknown, a restarted one posting again). The
# shortest start Timing allows (__post_init__ says why).
FAST_NODES = Timing(engine_start=2, kubelet_heartbeat=0.5, node_grace=3)

@dataclass
class LabHost:
    spec: HostSpec
    index: int
    address: str
    netns: str
    dir: str  # per-host state directory
    pid: int = 0  # the unshare process; its child is the host's PID 1

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def role(self) -> str:
        return self.spec.role

    @property
    def user(self) -> str:
        return self.spec.user

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LabHost:
        return cls(spec=HostSpec(**data.pop("spec")), **data)
