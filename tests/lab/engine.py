"""The lab's stand-in for the rke2 / k3s engine, run on a lab host.

The per-host wrapper /usr/local/bin/{rke2,k3s} answers `--version` itself (no Python start-up)
and execs this for everything else, adding `--distro` and `--role`. It behaves like the real
engine where cargoship can see it:

* `server` / `agent` read config.yaml and registries.yaml from /etc/rancher/<distro>/ at start;
  when either is not YAML or not a mapping (an empty file is fine) it logs one fatal line to
  stderr and exits 1. runit then restarts it, so it keeps failing, like systemd's restart loop.
* Once started it records {"pid", "started_at"} in /var/lib/rancher/<distro>/lab-engine.json
  and runs until SIGTERM, then removes that file and exits 0.
* Faults for tests, from /var/lib/rancher/<distro>/lab-fault: `fail-start` makes every start
  fail (whatever the config), `not-ready-once` makes the next start run but keep its node
  NotReady (and is used up by it).

It runs on the system Python (/usr/bin/python3 with python3-yaml), not the test virtualenv:
it is a program on the host, so it imports nothing from the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from engine_node import HEARTBEAT, Node, write_admin_kubeconfig

STATE_FILE = "lab-engine.json"
FAULT_FILE = "lab-fault"
CLUSTER_FILE = "lab-cluster.json"  # where the lab tells the engine its API and token
# Optional {"start_delay": seconds}: how long start-up takes before the node reports
# Ready (a real engine takes seconds to tens of seconds); benchmarks fix it.
TIMING_FILE = "lab-timing.json"


class EngineError(Exception):
    """A fatal start-up problem; the message becomes the one log line."""


def log(level: str, message: str) -> None:
    """One line in the real engine's (logrus) format, to stderr as the real one does."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    print(f'time="{now}" level={level} msg={json.dumps(message)}', file=sys.stderr, flush=True)


def load_mapping(path: Path) -> dict[str, Any]:
    """A YAML file that must hold a mapping; missing or empty means no settings."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise EngineError(f"failed to read {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).split())
        raise EngineError(f"failed to parse {path}: {detail}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise EngineError(f"failed to parse {path}: expected a mapping, "
                          f"got {type(data).__name__}")
    return data


def _check_endpoints(path: Path, registries: dict[str, Any]) -> None:
    """Like the real engine, refuse a registries.yaml it can't use. The lab's stand-in for
    "can't use" is an endpoint on the reserved .invalid domain (tests use it to make an
    engine fail to start on purpose)."""
    for mirror in (registries.get("mirrors") or {}).values():
        for endpoint in (mirror or {}).get("endpoint") or []:
            host = str(endpoint).split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]
            if host.endswith(".invalid"):
                raise EngineError(f"{path}: registry endpoint {endpoint} does not resolve")


@dataclass
class Engine:
    distro: str
    role: str
    config_path: Path
    data_dir: Path

    @property
    def registries_path(self) -> Path:
        return self.config_path.parent / "registries.yaml"

    @property
    def state_path(self) -> Path:
        return self.data_dir / STATE_FILE

    def start(self) -> None:
        """Everything the real engine does before it reports itself up."""
        # A state file from an earlier run would make a failed start look like a running one.
        self.state_path.unlink(missing_ok=True)
        self.ready = True
        fault_file = self.data_dir / FAULT_FILE
        fault = fault_file.read_text().strip() if fault_file.exists() else ""
        if fault == "fail-start":
            raise EngineError("lab fault: this engine refuses to start")
        if fault == "not-ready-once":
            fault_file.unlink()
            self.ready = False
        self.config = load_mapping(self.config_path)
        self.registries = load_mapping(self.registries_path)
        _check_endpoints(self.registries_path, self.registries)
        # Drop-ins are read like config.yaml, in name order, as the real engine does.
        for dropin in sorted(self.config_path.parent.glob("config.yaml.d/*.yaml")):
            load_mapping(dropin)
        delay = float(self._timing().get("start_delay", 0))
        if delay:
            # Counted from the process's start, so the stand-in's own start-up (Python,
            # imports) is inside the fixed time rather than added to it.
            time.sleep(max(0.0, delay - _running_for()))
        self.node = self._join_cluster()
        self._write_state({"pid": os.getpid(), "started_at": time.time()})
        log("info", f"{self.distro} {self.role} running (pid {os.getpid()})")

    def _timing(self) -> dict[str, Any]:
        try:
            data = json.loads((self.data_dir / TIMING_FILE).read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _join_cluster(self) -> Node | None:
        cluster_file = self.data_dir / CLUSTER_FILE
        if not cluster_file.exists():
            return None  # a lab without a Kubernetes API
        node = Node(cluster_file)
        if self.role == "controller":
            cluster = json.loads(cluster_file.read_text())
            write_admin_kubeconfig(self.config_path.parent / f"{self.distro}.yaml",
                                   cluster["admin_server"], cluster["token"])
        node.register()
        node.report(ready=self.ready)
        return node

    def serve(self, stop: threading.Event) -> None:
        """Run until asked to stop, keeping the node Ready like a kubelet."""
        while not stop.wait(HEARTBEAT):
            if self.node:
                self.node.report(ready=self.ready)

    def shutdown(self) -> None:
        self.state_path.unlink(missing_ok=True)
        if self.node:
            self.node.report(ready=False)
        log("info", f"{self.distro} {self.role} stopped")

    def _write_state(self, state: dict[str, Any]) -> None:
        # Atomic, so a reader never sees a half-written file.
        self.data_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state) + "\n")
        tmp.rename(self.state_path)


def _running_for() -> float:
    """Seconds since this process started (from /proc, 0 if unreadable)."""
    try:
        stat = Path("/proc/self/stat").read_text()
        started = int(stat.rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return max(0.0, uptime - started)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="engine.py")
    parser.add_argument("--distro", required=True, choices=("rke2", "k3s"))
    parser.add_argument("--role", choices=("controller", "worker"))
    parser.add_argument("command", nargs="?")
    args, rest = parser.parse_known_args(argv)
    if args.role is None:  # the wrapper may leave it out: the subcommand says it
        args.role = "worker" if args.command == "agent" else "controller"
    # The real `server` / `agent` take many flags; these two are the ones that move files.
    sub = argparse.ArgumentParser(prog=f"{args.distro} {args.command}", add_help=False)
    sub.add_argument("--config", "-c", default=f"/etc/rancher/{args.distro}/config.yaml")
    sub.add_argument("--data-dir", "-d", default=f"/var/lib/rancher/{args.distro}")
    opts, _ = sub.parse_known_args(rest)
    args.config, args.data_dir = Path(opts.config), Path(opts.data_dir)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.command not in ("server", "agent"):
        print(f"Incorrect Usage: {args.distro}: unknown command {args.command!r} "
              "(the lab engine knows server, agent, --version)", file=sys.stderr)
        return 1
    stop = threading.Event()
    # Before start(), so a stop request during start-up is not lost.
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    engine = Engine(args.distro, args.role, args.config, args.data_dir)
    try:
        engine.start()
    except EngineError as exc:
        log("fatal", str(exc))
        return 1
    try:
        engine.serve(stop)
    finally:
        engine.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
