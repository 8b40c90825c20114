"""Measured availability of the control plane during a sync (issue 27):

    python -m tests.bench.availability [--controllers 3,5] [--distros k3s,rke2]
                                       [--engine-start-seconds S] [--dir DIR]

For each size and engine: a lab of N controllers (real etcd members, tests/lab/etcd.py)
and one worker, a registries change that restarts every host, and `cargoship apply` while
a client writes (a merge-patch of an annotation on a PodDisruptionBudget that selects no
pod) and reads (a GET of the worker's node) through each controller's own API server
every 100 ms, and every member's /metrics is read every 100 ms. Reported per run:
requests and failures per controller, split into those inside that controller's own
restart (its engine's stop to ready: expected) and outside it (the cluster was
unavailable through a controller not being restarted), and of those the writes a
leader's hand-over caught (Probe.outside_handovers: real etcd fails them too); whether
any member ever said it had no leader (etcd_server_has_leader 0) and how many leader
changes (which member said it led, etcd_server_is_leader, in turn); each member's time
out of the cluster (not answering); the apply's wall time; the load average.

rke2 runs with every member's manifest marked changed (a certificate renewal at start does
that), so its members are recreated as k3s's restart with their engines: the case the
quorum gate is for.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.lab import HostSpec, Lab, Timing
from tests.lab.etcd import ELECTION_TIMEOUT

REQUEST_TIMEOUT = 5.0  # seconds a probe request may take

INTERVAL = 0.1
NEW_MIRROR = "https://mirror2.lab.internal:5000"


@dataclass
class Probe:
    """Requests through each controller's API server and each member's metrics, every
    INTERVAL seconds, until stopped; what failed and when."""

    lab: Lab
    node: str = "wrk-1"
    # What the writes go to. Not the node: the rollout cordons it with a compare-and-swap
    # (its resourceVersion), as client-go's RetryOnConflict does, 5 tries; 30 writes a
    # second to it, which no real node sees, made all five conflict under CI load.
    budget: str = "/apis/policy/v1/namespaces/default/poddisruptionbudgets/cargoship-probe"
    requests: dict[str, int] = field(default_factory=dict)
    failed: list[tuple[float, str, str]] = field(default_factory=list)  # when, host, why
    leaderless: list[tuple[float, str]] = field(default_factory=list)  # when, member's host
    leaders: list[tuple[float, str]] = field(default_factory=list)  # when, who said "me"
    silent: dict[str, list[float]] = field(default_factory=dict)  # host: when it did not answer
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.controllers = [h.name for h in self.lab.hosts if h.role == "controller"]
        context = ssl.create_default_context(cafile=str(self.lab.pki_dir / "server-ca.crt"))
        context.load_cert_chain(self.lab.pki_dir / "client-admin.crt",
                                self.lab.pki_dir / "client-admin.key")
        self.context = context
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._client, args=(h,), daemon=True)
                        for h in self.controllers]
        self.threads += [threading.Thread(target=self._member, args=(h,), daemon=True)
                         for h in self.controllers]

    def __enter__(self) -> Probe:
        body = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": "cargoship-probe", "namespace": "default"},
                "spec": {"maxUnavailable": 1,
                         "selector": {"matchLabels": {"cargoship-probe": "none"}}}}
        url = self.lab.apiserver_url(self.controllers[0]) + self.budget.rsplit("/", 1)[0]
        request = urllib.request.Request(url, method="POST", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT,
                                    context=self.context) as answer:
            answer.read()
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()

    def _request(self, host: str, method: str, body: dict[str, Any] | None) -> None:
        path = self.budget if method == "PATCH" else f"/api/v1/nodes/{self.node}"
        url = f"{self.lab.apiserver_url(host)}{path}"
        request = urllib.request.Request(
            url, method=method, data=json.dumps(body).encode() if body else None,
            headers={"Content-Type": "application/merge-patch+json"})
        when = time.time()
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT,
                                        context=self.context) as answer:
                answer.read()
        except (OSError, urllib.error.HTTPError) as exc:
            why = str(exc)[:100]
            if isinstance(exc, urllib.error.HTTPError):  # the API's own words: what failed
                with contextlib.suppress(OSError, ValueError):
                    why += f" ({json.loads(exc.read()).get('message', '')[:200]})"
            with self.lock:
                self.failed.append((when, host, f"{method}: {why}"))
        with self.lock:
            self.requests[host] = self.requests.get(host, 0) + 1

    def _client(self, host: str) -> None:
        n = 0
        while not self.stop.wait(INTERVAL):
            n += 1
            self._request(host, "PATCH", {"metadata": {"annotations": {
                f"probe/{host}": str(n)}}})
            self._request(host, "GET", None)

    def _member(self, host: str) -> None:
        while not self.stop.wait(INTERVAL):
            try:
                text = str(self.lab.etcd_call(host, "/metrics", timeout=1))
            except OSError:
                with self.lock:
                    self.silent.setdefault(host, []).append(time.time())
                continue
            for line in text.splitlines():
                if line.startswith("etcd_server_has_leader ") and float(line.split()[1]) != 1:
                    with self.lock:
                        self.leaderless.append((time.time(), host))
                elif line.startswith("etcd_server_is_leader ") and float(line.split()[1]) == 1:
                    with self.lock:
                        self.leaders.append((time.time(), host))

    def outside(self, since: float) -> list[tuple[float, str, str]]:
        """Failures through a controller outside its own engine's outage."""
        return [(when, host, why) for when, host, why in self.failed
                if not any(down - 0.2 <= when <= up
                           for down, up in self.lab.outages(host, since))]

    def handovers(self) -> list[tuple[float, float]]:
        """Each change of leader: (the old leader's last sample saying it led, the new
        one's first)."""
        changes: list[tuple[float, float]] = []
        previous: tuple[float, str] | None = None
        for when, host in sorted(self.leaders):
            if previous is not None and previous[1] != host:
                changes.append((previous[0], when))
            previous = (when, host)
        return changes

    def outside_handovers(self, since: float) -> list[tuple[float, str, str]]:
        """outside(since), less the writes a leader's hand-over caught. While a leader
        hands over, raft drops the proposals it is sent (raft.go stepLeader, MsgProp with
        leadTransferee set) without a word to the member that forwarded one, which then
        answers its client only at its request timeout ("etcdserver: request timed out";
        kube-apiserver's etcd client does not retry a write): so a write in flight then
        fails through any controller, on a real cluster too. One counts here when it
        was a write the API refused for etcd and a hand-over fell within its time."""
        changes = self.handovers()
        return [(when, host, why) for when, host, why in self.outside(since)
                if not (why.startswith("PATCH") and "etcd" in why and any(
                    when - INTERVAL <= new and old <= when + REQUEST_TIMEOUT
                    for old, new in changes))]

    def leaderless_spells(self) -> list[tuple[str, float, float]]:
        """Each member's runs of samples saying it had no leader: (host, first, last), a
        run's samples at most three intervals apart. A leader's hand-over (etcd hands
        leadership on at a clean stop) shows as a run of one sample or so: the followers
        have no leader for the round trip of the new leader's election. A leader lost
        without one, or a lost quorum, leaves the members leaderless for at least an
        election timeout: no follower campaigns before it (raft's electionElapsed)."""
        runs: list[tuple[str, float, float]] = []
        for host in sorted({who for _, who in self.leaderless}):
            times = sorted(when for when, who in self.leaderless if who == host)
            first = last = times[0]
            for when in times[1:]:
                if when - last > 3 * INTERVAL:
                    runs.append((host, first, last))
                    first = when
                last = when
            runs.append((host, first, last))
        return runs

    def leaderless_longer_than(self, seconds: float) -> list[tuple[str, float, float]]:
        return [run for run in self.leaderless_spells() if run[2] - run[1] >= seconds]

    def time_out(self, host: str) -> float:
        """Seconds the member did not answer (each miss stands for one interval)."""
        return round(len(self.silent.get(host, [])) * INTERVAL, 1)

    def leader_changes(self) -> list[str]:
        """The members that led, in turn (from their own etcd_server_is_leader): a change
        is a new name in the sequence. (A restarted member's own counter,
        etcd_server_leader_changes_seen_total, starts again from zero, so it can't say.)"""
        turns: list[str] = []
        for _, host in sorted(self.leaders):
            if not turns or turns[-1] != host:
                turns.append(host)
        return turns


def _cargoship(*args: str | Path) -> subprocess.CompletedProcess[str]:
    argv = [str(Path(sys.executable).with_name("cargoship")), *map(str, args)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=1800)


def run_one(root: Path, controllers: int, distro: str, timing: Timing) -> dict[str, Any]:
    specs = [HostSpec(f"ctl-{i}", "controller") for i in range(1, controllers + 1)]
    specs.append(HostSpec("wrk-1", "worker"))
    lab = Lab.up(root / f"{distro}-{controllers}", specs, distro=distro, timing=timing,
                 etcd=True)
    try:
        config = lab.dir / "cluster.yaml"
        data = yaml.safe_load(config.read_text())
        data["spec"]["engineConfig"]["registries"]["mirrors"]["docker.io"]["endpoint"] = [
            NEW_MIRROR]
        data["spec"]["options"].update(readyTimeoutSeconds=300)
        config.write_text(yaml.safe_dump(data, sort_keys=False))
        plan = lab.dir / "plan.json"
        made = _cargoship("plan", "-c", config, "-out", plan)
        if made.returncode != 0:
            raise RuntimeError(f"plan failed: {made.stdout[-2000:]}{made.stderr[-2000:]}")
        if distro == "rke2":
            for name in (h.name for h in lab.hosts if h.role == "controller"):
                lab.etcd_manifest_changed(name)
        since = time.time()
        with Probe(lab) as probe:
            started = time.monotonic()
            applied = _cargoship("apply", plan, "--confirm")
            wall = time.monotonic() - started
        if applied.returncode != 0:
            raise RuntimeError(f"apply failed: {applied.stdout[-3000:]}")
        names = probe.controllers
        outside = probe.outside(since)
        handover = set(outside) - set(probe.outside_handovers(since))
        return {
            "distro": distro, "controllers": controllers, "apply_wall": round(wall, 1),
            "requests": {h: probe.requests.get(h, 0) for h in names},
            "failed": {h: sum(1 for _, who, _ in probe.failed if who == h) for h in names},
            "failed_outside_own_restart": {h: sum(1 for _, who, _ in outside if who == h)
                                           for h in names},
            "outside_in_a_handover": {h: sum(1 for _, who, _ in handover if who == h)
                                      for h in names},
            "outside_examples": [why for _, _, why in outside[:3]],
            "leaderless_samples": len(probe.leaderless),
            "leaderless_longest": round(max((last - first for _, first, last
                                             in probe.leaderless_spells()), default=0.0), 2),
            "election_timeout": ELECTION_TIMEOUT,
            "leaders_in_turn": probe.leader_changes(),
            "member_time_out": {h: probe.time_out(h) for h in names},
            "load_average": [round(x, 2) for x in os.getloadavg()],
        }
    finally:
        lab.down()


def report(result: dict[str, Any]) -> str:
    names = list(result["requests"])
    turns = result["leaders_in_turn"]
    lines = [f"{result['distro']} {result['controllers']} controllers: apply "
             f"{result['apply_wall']} s, leaderless samples {result['leaderless_samples']} "
             f"(longest run {result['leaderless_longest']} s), "
             f"{max(0, len(turns) - 1)} leader change(s) ({' -> '.join(turns)}), "
             f"load average {' '.join(map(str, result['load_average']))}"]
    for host in names:
        lines.append(
            f"  {host}: {result['requests'][host]} requests, {result['failed'][host]} failed "
            f"({result['failed_outside_own_restart'][host]} outside its own restart, "
            f"{result['outside_in_a_handover'][host]} of them in a leader's hand-over), "
            f"member out {result['member_time_out'][host]} s")
    for example in result["outside_examples"]:
        lines.append(f"  outside its restart: {example}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.availability",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--controllers", default="3,5", help="comma list of sizes")
    parser.add_argument("--distros", default="k3s,rke2")
    parser.add_argument("--engine-start-seconds", type=float, default=10.0,
                        help="an engine is READY this long after its start (real: 30-120)")
    parser.add_argument("--kubelet-heartbeat-seconds", type=float, default=10.0)
    parser.add_argument("--node-grace-seconds", type=float, default=40.0)
    parser.add_argument("--dir", type=Path, help="where the labs go (default: a temp dir)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON too")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("availability: the lab needs root", file=sys.stderr)
        return 1
    try:
        timing = Timing(args.engine_start_seconds, args.kubelet_heartbeat_seconds,
                        args.node_grace_seconds)
    except ValueError as exc:
        parser.error(f"--engine-start-seconds: {exc}")
    root = args.dir or Path(tempfile.mkdtemp(prefix="cargoship-availability-"))
    results = []
    bad = False
    for distro in [d for d in args.distros.split(",") if d]:
        for size in [int(n) for n in args.controllers.split(",") if n]:
            try:
                result = run_one(root, size, distro, timing)
            except RuntimeError as exc:
                print(f"{distro} {size}: {exc}", file=sys.stderr)
                bad = True
                continue
            results.append(result)
            print(report(result), flush=True)
            bad = bad or result["leaderless_longest"] >= result["election_timeout"] or any(
                result["failed_outside_own_restart"][h] - result["outside_in_a_handover"][h]
                for h in result["requests"])
    if args.json:
        print(json.dumps(results, indent=2))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
