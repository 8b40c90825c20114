"""An apply rollout on lab hosts whose drain and restart take a fixed time, compared with
the ideal: controllers one at a time plus the workers in a sliding window of c.

Every node runs one pod (owned by a ReplicaSet, so drain evicts it) whose eviction the lab's
API completes after `drain` seconds (its terminationGracePeriodSeconds); every engine takes
`restart` seconds from its start until its node reports Ready. Each round puts drift on
every host (registries.yaml), plans, and applies with options.concurrency.workers = c.
"""

from __future__ import annotations

import math
import re
import uuid
from dataclasses import dataclass
from pathlib import Path

from tests.lab import Lab, Timing

from .fleet import specs
from .measure import Run, run
from .plans import cargoship

REGISTRIES = "/etc/rancher/rke2/registries.yaml"


@dataclass(frozen=True)
class RolloutResult:
    controllers: int
    workers: int
    concurrency: int
    drain: float
    restart: float
    apply: Run
    rollout: float  # the rollout alone, as the executor logged it
    # Each host's time in the rollout, from the moment it is taken to the moment it is
    # done (the executor's "host begins"/"host ends" log lines).
    spans: tuple[float, ...] = ()

    @property
    def host_overheads(self) -> tuple[float, ...]:
        """Per host: its span beyond the drain and restart waits (what cargoship adds)."""
        return tuple(span - self.drain - self.restart for span in self.spans)

    @property
    def nodes(self) -> int:
        return self.controllers + self.workers

    @property
    def ideal(self) -> float:
        per_node = self.drain + self.restart
        return (self.controllers + math.ceil(self.workers / self.concurrency)) * per_node

    @property
    def overhead_per_node(self) -> float:
        """cargoship's time outside the drain and restart waits, per node, for the whole
        apply command (connect, lock, drift check, rollout, records)."""
        return (self.apply.wall - self.ideal) / self.nodes

    @property
    def rollout_ratio(self) -> float:
        return self.rollout / self.ideal

    @property
    def ok(self) -> bool:
        return self.apply.code == 0 and self.rollout > 0


def start_lab(work: Path, workers: int, controllers: int, restart: float) -> Lab:
    # A real kubelet's timings (a status every 10 s, Unknown after 40 s silent), not the
    # test suite's fast ones: a rollout must not lean on a heartbeat coming soon after a
    # start, and 21 engines posting every second would load the lab's shared CPUs with
    # API traffic a real cluster spreads over its own machines.
    timing = Timing(engine_start=restart, kubelet_heartbeat=10.0, node_grace=40.0)
    return Lab.up(work / "rollout-lab", specs(controllers + workers, controllers),
                  timing=timing)


def _pods(lab: Lab, round_name: str, drain: float) -> None:
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "bench",
             "uid": str(uuid.uuid4()), "controller": True}
    for host in lab.hosts:
        lab.api("POST", "/api/v1/namespaces/default/pods", {
            "metadata": {"name": f"bench-{round_name}-{host.name}", "ownerReferences": [owner]},
            "spec": {"nodeName": host.name, "terminationGracePeriodSeconds": drain,
                     "containers": [{"name": "app", "image": "registry.lab/app:1"}]}})


def _drift(lab: Lab, round_name: str) -> None:
    for host in lab.hosts:
        lab.exec(host.name, f"printf 'mirrors: {{}}\\n# {round_name}\\n' > {REGISTRIES}")


def bench_rollout(lab: Lab, work: Path, concurrency: int, drain: float,
                  restart: float) -> RolloutResult:
    name = f"c{concurrency}"
    config = lab.write_cluster_yaml(work / f"rollout-{name}.yaml", options={
        "concurrency": {"hosts": 64, "workers": concurrency},
        "readyTimeoutSeconds": int(restart * 4 + 30), "drain": {"timeoutSeconds": 120}})
    _pods(lab, name, drain)
    _drift(lab, name)
    plan = work / f"rollout-{name}.plan.json"
    planned = run([*cargoship(), "--no-color", "plan", "-c", str(config), "-out", str(plan)])
    if planned.code != 0:
        raise RuntimeError(f"rollout plan failed: {planned.stdout[-2000:]}{planned.stderr}")
    log = work / f"rollout-{name}.log"
    log.unlink(missing_ok=True)
    applied = run([*cargoship(), "--log-file", str(log), "apply", str(plan), "--confirm"],
                  timeout=1800)
    text = log.read_text() if log.exists() else ""
    match = re.search(r"rollout of .* took ([\d.]+) s", text)
    controllers = sum(1 for h in lab.hosts if h.role == "controller")
    return RolloutResult(controllers, len(lab.hosts) - controllers, concurrency, drain,
                         restart, applied, float(match.group(1)) if match else -1.0,
                         host_spans(text))


_STAMP = r"^\S+ (\d\d):(\d\d):(\d\d),(\d\d\d) DEBUG cargoship\.executor: (.+): host (begins|ends)"


def host_spans(log_text: str) -> tuple[float, ...]:
    """Seconds from each host's "host begins" to its "host ends" line in a --log-file."""
    began: dict[str, float] = {}
    spans: list[float] = []
    for found in re.finditer(_STAMP, log_text, re.MULTILINE):
        h, m, s, ms, host, what = found.groups()
        at = int(h) * 3600 + int(m) * 60 + int(s) + int(ms) / 1000
        if what == "begins":
            began[host] = at
        elif host in began:
            spans.append((at - began.pop(host)) % 86400)
    return tuple(spans)
