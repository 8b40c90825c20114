"""The benchmark's hosts: one lab of the largest size, a latency proxy per latency, and a
cluster.yaml per (size, latency) whose hosts are reached through that proxy, with the
proxy's address:port in known_hosts so host keys are still checked strictly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.lab import HostSpec, Lab

CONTROLLERS = 3


def specs(total: int, controllers: int = CONTROLLERS) -> list[HostSpec]:
    controllers = min(controllers, total)
    names = [(f"ctl-{i}", "controller") for i in range(1, controllers + 1)]
    names += [(f"wrk-{i}", "worker") for i in range(1, total - controllers + 1)]
    return [HostSpec(name, role) for name, role in names]


@dataclass
class Proxy:
    delay_ms: float
    ports: dict[str, int]
    process: subprocess.Popen[bytes]

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            self.process.wait(10)


def start_proxy(work: Path, addresses: list[str], delay_ms: float) -> Proxy:
    targets = work / f"proxy-{delay_ms:g}ms-targets.json"
    ports_file = work / f"proxy-{delay_ms:g}ms-ports.json"
    ports_file.unlink(missing_ok=True)
    targets.write_text(json.dumps(addresses))
    log = open(work / f"proxy-{delay_ms:g}ms.log", "ab")
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.bench.proxy", "--delay-ms", str(delay_ms),
         "--targets", str(targets), "--ports", str(ports_file)],
        stdout=log, stderr=log, stdin=subprocess.DEVNULL,
        cwd=Path(__file__).resolve().parents[2])
    log.close()
    deadline = time.monotonic() + 30
    while not ports_file.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"latency proxy did not start; see {log.name}")
        time.sleep(0.05)
    return Proxy(delay_ms, json.loads(ports_file.read_text()), process)


@dataclass
class Fleet:
    lab: Lab
    work: Path
    proxies: dict[float, Proxy] = field(default_factory=dict)

    def host_keys(self) -> dict[str, str]:
        keys = {}
        for line in (self.lab.dir / "known_hosts").read_text().splitlines():
            address, key = line.split(" ", 1)
            keys[address] = key
        return keys

    def proxy(self, delay_ms: float) -> Proxy:
        if delay_ms not in self.proxies:
            self.proxies[delay_ms] = start_proxy(
                self.work, [h.address for h in self.lab.hosts], delay_ms)
        return self.proxies[delay_ms]

    def cluster_yaml(self, size: int, delay_ms: float, options: dict[str, Any] | None = None,
                     ) -> Path:
        """The first `size` hosts of the lab, reached through the proxy of this latency."""
        proxy = self.proxy(delay_ms)
        keys = self.host_keys()
        hosts = self.lab.hosts[:size]
        known = self.work / f"known_hosts-{delay_ms:g}ms"
        known.write_text("".join(f"[127.0.0.1]:{proxy.ports[h.address]} {keys[h.address]}\n"
                                 for h in self.lab.hosts))
        path = self.work / f"cluster-{size}-{delay_ms:g}ms.yaml"
        spec: dict[str, Any] = {
            "engine": {"distro": self.lab.distro, "version": self.lab.version},
            "hosts": [{"role": h.role, "ssh": {
                "address": "127.0.0.1", "port": proxy.ports[h.address], "user": h.user,
                "keyPath": str(self.lab.dir / "id_ed25519"), "knownHosts": str(known)}}
                for h in hosts],
            "engineConfig": {"registries": {"mirrors": {"docker.io": {
                "endpoint": ["https://mirror.lab.internal:5000"]}}}},
        }
        if options:
            spec["options"] = options
        path.write_text(yaml.safe_dump({"apiVersion": "cargoship/v1", "kind": "Cluster",
                                        "metadata": {"name": f"bench-{size}"}, "spec": spec},
                                       sort_keys=False))
        return path

    def stop(self) -> None:
        """Stop the latency proxies. The lab stays up (`KEEP` runs keep it): whoever
        started the fleet takes `self.lab` down, or its hosts run on beside whatever is
        measured next (this left five 100-host labs under whole test runs, 2026-12-05)."""
        for proxy in self.proxies.values():
            proxy.stop()
        self.proxies.clear()


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(x) for x in (task / "children").read_text().split()]
    except OSError:
        pass
    return found


def sshd_pids(lab: Lab) -> list[int]:
    """The sshd daemon of every lab host (below its unshare process)."""
    pids, todo = [], [h.pid for h in lab.hosts if h.pid]
    while todo:
        pid = todo.pop()
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "sshd":
                pids.append(pid)
                continue  # its children are sessions, counted in its own figures
        except OSError:
            continue
        todo += _children(pid)
    return pids


def hosts_cpu(pids: list[int]) -> float:
    """CPU seconds the lab hosts' sshd spent so far, sessions included (each session's
    processes are reaped by sshd, so they add to its children's time)."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime
    return total


def start_fleet(work: Path, size: int) -> Fleet:
    # No Kubernetes API stand-in: a plan of these hosts does not need it (kubeconfig and
    # labels are off), and hundreds of engines heartbeating into one Python server would
    # load the machine that is being measured. Engines still run, under runit.
    lab = Lab.up(work / "lab", specs(size), kube_api=False)
    return Fleet(lab, work)
