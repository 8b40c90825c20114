"""The lab's stand-in for the rke2 / k3s engine, run on a lab host.

The per-host wrapper /usr/local/bin/{rke2,k3s} answers `--version` itself (no Python start-up)
and execs this for everything else, adding `--distro` and `--role`. It behaves like the real
engine where cargoship's safety depends on it:

* `server` / `agent` find and read their config as the real engines do (engine_config.py:
  the config file named by `<PROGRAM>_CONFIG_FILE` or `--config`, its `.d` drop-ins, the
  command line's flags, the unit's environment) and the registries file `private-registry`
  names, at start; a file that is not YAML or not a mapping is one fatal line on stderr
  and exit 1. runit restarts it, so it keeps failing, like systemd's Restart=always.
  The lab's own files (lab-engine.json, lab-fault, lab-timing.json, lab-cluster.json) stay
  in /var/lib/rancher/<distro> wherever `data-dir` moves the engine's data.
* Start-up takes `start_delay` seconds (lab-timing.json): the node registers under the
  name the real engine derives (`node-name`, else the lowercased hostname), posts its
  status, then renews its node Lease every `heartbeat` seconds and posts its status again
  only when it changes, as a kubelet does (engine_node.py); on a controller that happens
  `apiserver_start` seconds earlier, and its API server's /readyz passes only at the end
  (post-start hooks). Only then does the engine record {"pid", "started_at"} in
  /var/lib/rancher/<distro>/lab-engine.json: that is its Type=notify "READY" (the
  service's runit `check` script looks for it; the API server's /readyz waits for it).
* On SIGTERM it just stops: it does not mark its node NotReady (a real kubelet doesn't),
  so the node reads Ready until the API's node grace period has passed.
* Controllers: rke2 runs the API server as a static pod (the `kube-apiserver` runit
  service), restarted at every engine start and left running when the engine stops;
  k3s serves the API inside its own process, so stopping k3s takes that node's API down.
  A broken audit policy or admission config makes rke2's API server pod crash-loop while
  the engine waits for it (never READY), and makes k3s itself exit 1 (a crash loop).
* Every state change is a line `<unix time> <event>` (starting, ready, stopping, stopped;
  failed for a fatal start)
  in /var/log/lab-engine/events.log, so tests can prove ordering from the hosts' side.
* rke2 controllers: at each start the engine writes the API server's static pod manifest
  (its uid a hash of what the API server runs with) and, as the kubelet, posts the API
  server's mirror pod `kube-apiserver-<node>` (engine_mirror.py: config hash, container
  startedAt, restartCount).
* Faults for tests, from /var/lib/rancher/<distro>/lab-fault: `fail-start` makes every start
  fail (whatever the config), `not-ready-once` makes the next start run but keep its node
  NotReady (and is used up by it), `apiserver-late:<s>` (rke2) makes the next start write
  a manifest of a new uid (a renewed certificate, say) but leave the old API server pod
  serving for <s> seconds after the engine is READY before the kubelet replaces it
  (rancher/rke2#3004: the engine looked started before its new pod ran), used up by it.
  `hold-start` models no engine: it is a test's hand on the start, like a pause of an
  etcd member. A start waits, its node unposted, until the file no longer says so; the
  start delay counts from the process's start as ever, so it is over by the release.
  A test then changes the cluster between an engine's start and its first word, whatever
  the machine's load.

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
from pathlib import Path
from typing import TYPE_CHECKING, Any

import engine_config
from engine_node import HEARTBEAT, STATUS_REPORT, Node, write_admin_kubeconfig

PLEG_RELIST = 1.0  # seconds between the kubelet's looks at its containers
LEASE_RETRY, LEASE_RETRY_MAX = 0.2, 7.0  # a failed Lease renewal's backoff (see _leases)
SLICE = 0.25  # seconds: how often the main thread looks whether SIGTERM came

if TYPE_CHECKING:
    import ssl

STATE_FILE = "lab-engine.json"
FAULT_FILE = "lab-fault"
CLUSTER_FILE = "lab-cluster.json"  # where the lab tells the engine its API and token
# {"start_delay": s, "heartbeat": s, "status_report": s, "apiserver_start": s}: how long
# start-up takes before the engine is up (a real one takes 30-120 s), how often the
# kubelet renews its Lease, how long an unchanged node status goes unposted, and how much
# of the start a controller's API server takes after its kubelet is up.
TIMING_FILE = "lab-timing.json"
APISERVER_ARGS_FILE = "lab-apiserver-args.json"  # the API server's flags, engine-built
EVENTS_LOG = Path("/var/log/lab-engine/events.log")
APISERVER_SERVICE = "/etc/service/kube-apiserver"  # rke2's static pod
ETCD_SERVICE = Path("/etc/service/etcd")  # the controller's member, in a lab with etcd
ETCD_MANIFEST_CHANGED = "lab-etcd-manifest-changed"  # hostfs.ETCD_MANIFEST_CHANGED
# Where this start found the engine's data (hostfs.DATA_DIR_FILE): the static pods' run
# scripts (rke2's etcd and kube-apiserver, k3s's member) read their paths from it.
DATA_DIR_FILE = "lab-data-dir"


class EngineError(Exception):
    """A fatal start-up problem; the message becomes the one log line."""


class Stopped(Exception):
    """SIGTERM arrived while starting."""


def log(level: str, message: str) -> None:
    """One line in the real engine's (logrus) format, to stderr as the real one does."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    print(f'time="{now}" level={level} msg={json.dumps(message)}', file=sys.stderr, flush=True)


def event(name: str) -> None:
    EVENTS_LOG.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(EVENTS_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{time.time():.6f} {name}\n".encode())
    finally:
        os.close(fd)


def _check_endpoints(path: Path, registries: dict[str, Any]) -> None:
    """Like the real engine, refuse a registries.yaml it can't use. The lab's stand-in for
    "can't use" is an endpoint on the reserved .invalid domain (tests use it to make an
    engine fail to start on purpose)."""
    for mirror in (registries.get("mirrors") or {}).values():
        for endpoint in (mirror or {}).get("endpoint") or []:
            host = str(endpoint).split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]
            if host.endswith(".invalid"):
                raise EngineError(f"{path}: registry endpoint {endpoint} does not resolve")


class Engine:
    # A plain class, not a dataclass: importing dataclasses (and inspect with it) is ~10 ms
    # of every start's CPU. What only controllers use (ssl, urllib, subprocess) is imported
    # where it is used, for the same reason.
    def __init__(self, distro: str, role: str, argv: list[str]) -> None:
        self.distro, self.role, self.argv = distro, role, argv
        # The lab's own bookkeeping: a fixed place, whatever data-dir says.
        self.lab_dir = Path(f"/var/lib/rancher/{distro}")
        self.config_path = Path(f"/etc/rancher/{distro}/config.yaml")
        self.data_dir = self.lab_dir
        self.stop = threading.Event()  # for the threads; set by the main thread only
        self.terminating = False  # set by SIGTERM's handler
        self.node: Node | None = None
        self.api_server: Any = None  # k3s: the API server inside this process
        self.mirror: Any = None  # rke2 controller: engine_mirror.Mirror, as its kubelet

    @property
    def state_path(self) -> Path:
        return self.lab_dir / STATE_FILE

    def start(self) -> None:
        """Everything the real engine does before it reports itself up."""
        # A state file from an earlier run would make a failed start look like a running one.
        self.state_path.unlink(missing_ok=True)
        event("starting")
        self.ready = True
        fault_file = self.lab_dir / FAULT_FILE
        fault = fault_file.read_text().strip() if fault_file.exists() else ""
        if fault == "fail-start":
            raise EngineError("lab fault: this engine refuses to start")
        while fault == "hold-start":
            self._wait(SLICE / 5)
            fault = fault_file.read_text().strip() if fault_file.exists() else ""
        if fault == "not-ready-once":
            fault_file.unlink()
            self.ready = False
        self.apiserver_late: float | None = None
        if fault.startswith("apiserver-late:") and self.distro == "rke2":
            fault_file.unlink()
            self.apiserver_late = float(fault.partition(":")[2] or 0)
        try:
            self.config_path, self.config = engine_config.effective_settings(
                self.distro, self.argv, dict(os.environ))
            self.data_dir = engine_config.data_dir(self.distro, self.config)
            registries_path = engine_config.registries_path(self.distro, self.config)
            self.registries = engine_config.load_mapping(registries_path)
        except engine_config.ConfigError as exc:
            raise EngineError(str(exc)) from None
        _check_endpoints(registries_path, self.registries)
        self.apiserver_args = engine_config.apiserver_args(self.distro, self.config)
        self.name = engine_config.node_name(self.config, self.data_dir)
        timing = self._timing()
        # Counted from the process's start, so the stand-in's own start-up (Python,
        # imports) is inside the fixed time rather than added to it.
        cluster = self._relocated(self._cluster())
        # READY `start_delay` after the start; a controller's API server takes the last
        # `apiserver_start` of it, after its kubelet is up.
        kubelet_at = float(timing.get("start_delay", 0))
        if cluster is not None and self.role == "controller":
            kubelet_at -= float(timing.get("apiserver_start", 0))
        self._wait(kubelet_at - engine_config.process_age())
        if cluster is not None:
            # The kubelet is up before the API server is ready (on a real server it can
            # post through another server's API meanwhile): a fresh node status alone does
            # not mean this controller serves again.
            labels = {**cluster.get("labels", {}), **engine_config.node_labels(self.config)}
            self.node = Node(cluster["api"], cluster["token"], self.name, labels,
                             engine_config.node_addresses(self.config, self.name),
                             report_every=float(timing.get("status_report", STATUS_REPORT)),
                             say=log)
            self.node.register()
            every = float(timing.get("heartbeat", HEARTBEAT))
            # The Lease first: a node that reads Ready has its Lease too (as a rule: each
            # is tried again on its own clock when its first try fails).
            renewed = self.node.renew_lease()
            posted = self.node.report(ready=self.ready)
            if self.distro == "rke2" and self.role == "controller":
                from engine_mirror import CONTAINER_STATE, Mirror

                self.mirror = Mirror(self.node, self.data_dir / CONTAINER_STATE)
                self.mirror.sync()
            threading.Thread(target=self._leases, args=(every, renewed), daemon=True).start()
            threading.Thread(target=self._heartbeats, args=(every, posted),
                             daemon=True).start()
        if cluster is not None and self.role == "controller":
            self._start_etcd()
            # The deploy controller, on its data dir's manifests (deploy.py).
            import deploy

            controller = deploy.DeployController(cluster["api"], cluster["token"],
                                                 self.data_dir / "server" / "manifests")
            threading.Thread(target=controller.run, args=(self.stop,), daemon=True).start()
            # write-kubeconfig's default: /etc/rancher/<distro>/<distro>.yaml, wherever the
            # config file is.
            write_admin_kubeconfig(Path(f"/etc/rancher/{self.distro}/{self.distro}.yaml"),
                                   cluster["tls_dir"])
            self._start_api_server(cluster)
        event("ready")  # first: nobody may see this engine's API server ready before it
        # The config as merged (what the real engine would run with), for tests to read.
        # ready_after: seconds from the process's start, which the "starting" event can't
        # give (the stand-in logs it only after its own Python start-up, 0.1-1 s under load).
        self._write_state({"pid": os.getpid(), "started_at": time.time(), "node": self.name,
                           "ready_after": round(engine_config.process_age(), 3),
                           "config": self.config, "config_file": str(self.config_path),
                           "data_dir": str(self.data_dir),
                           "registries": str(engine_config.registries_path(self.distro,
                                                                           self.config)),
                           "apiserver_args": self.apiserver_args})
        log("info", f"{self.distro} {self.role} running (pid {os.getpid()}, node {self.name})")

    def _wait(self, seconds: float) -> None:
        """Sleep `seconds` on the main thread, or raise Stopped once SIGTERM came. In
        slices of time.sleep, not on the Event: see `terminate`."""
        deadline = time.monotonic() + seconds
        while not self.terminating:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(SLICE, left))
        self.stop.set()
        raise Stopped()

    def _timing(self) -> dict[str, Any]:
        try:
            data = json.loads((self.lab_dir / TIMING_FILE).read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _cluster(self) -> dict[str, Any] | None:
        cluster_file = self.lab_dir / CLUSTER_FILE
        if not cluster_file.exists():
            return None  # a lab without a Kubernetes API
        data: dict[str, Any] = json.loads(cluster_file.read_text())
        return data

    def _relocated(self, cluster: dict[str, Any] | None) -> dict[str, Any] | None:
        """The server's certificates and etcd's data where `data-dir` puts them: rke2
        writes its static pods' manifests (etcd, kube-apiserver) from its data dir at every
        start (pkg/podexecutor/staticpod.go), and k3s derives its TLS directory and its
        member's data dir from it (pkg/daemons/config, pkg/etcd/etcd.go DBDir). The lab
        laid them out in the default place; a test that moves a host's data moves them
        along and sets data-dir. The path is left for the run scripts (hostfs
        DATA_DIR_FILE) before any of them starts."""
        if cluster is None or self.role != "controller":
            return cluster
        (self.lab_dir / DATA_DIR_FILE).write_text(f"{self.data_dir}\n")
        if self.data_dir == self.lab_dir:
            return cluster
        tls = self.data_dir / "server" / "tls"
        if not tls.exists() and (self.lab_dir / "server" / "tls").is_dir():
            # A data dir without certificates gets them at start, signed by the cluster's
            # CAs from its bootstrap data (k3s pkg/daemons/control/deps/deps.go genCerts,
            # pkg/bootstrap): the lab's, copied.
            import shutil

            shutil.copytree(self.lab_dir / "server" / "tls", tls)

        def moved(path: str) -> str:  # server/ and agent/ only: lab-* files stay put
            for part in ("server", "agent"):
                if path.startswith(f"{self.lab_dir}/{part}/"):
                    return f"{self.data_dir}/{path[len(str(self.lab_dir)) + 1:]}"
            return path

        return {**cluster, "tls_dir": moved(str(cluster["tls_dir"]) + "/").rstrip("/"),
                "apiserver_args": [moved(a) for a in cluster["apiserver_args"]]}

    def _start_api_server(self, cluster: dict[str, Any]) -> None:
        # The API server's arguments, as rke2 writes them into the static pod's manifest
        # (and k3s passes them to the server it runs in-process).
        args_file = self.lab_dir / APISERVER_ARGS_FILE
        if self.distro == "k3s":
            args_file.write_text(json.dumps(self.apiserver_args) + "\n")
            # In this very process: a bad API server config is the engine's own fatal error.
            import kubeapi

            try:
                kubeapi.check_apiserver_args(args_file)
            except engine_config.ConfigError as exc:
                raise EngineError(f"kube-apiserver exited: {exc}") from None
            self.api_server = kubeapi.make_server(kubeapi.parse_args(cluster["apiserver_args"]))
            threading.Thread(target=self.api_server.serve_forever, daemon=True).start()
        else:
            # rke2 writes the manifest once etcd is available (staticpod.go, APIServer):
            # until then the kubelet (up already) runs, and restarts, the pod of the
            # manifest still there, whatever config it is of.
            self._wait(float(self._timing().get("manifest_after", 0)))
            # The flags are the manifest's own: a restart of the pod before it still runs
            # with the old ones.
            args_file.write_text(json.dumps(self.apiserver_args) + "\n")
            self._write_manifest(cluster)
            if self.apiserver_late is None:
                # The kubelet (re)creates the static pod from the manifest this start wrote.
                _restart_apiserver()
            else:  # the old pod serves on, and is replaced only later
                threading.Thread(target=self._replace_late, args=(self.apiserver_late,),
                                 daemon=True).start()
            log("info", "Waiting for API server to become available")
        # rke2 waits for its API server however long it takes (TimeoutStartSec=0): a
        # crash-looping one keeps the engine from ever reporting READY.
        context = _any_server_context()
        while not _readyz_ok(context):
            self._wait(0.1)

    def _write_manifest(self, cluster: dict[str, Any]) -> None:
        from engine_mirror import MANIFEST, manifest_uid, write_manifest

        path = self.data_dir / MANIFEST
        # The flags the engine built (its own, then the user's kube-apiserver-arg) and the
        # files they name: what rke2's static pod manifest is made of.
        files = list(engine_config.apiserver_files(self.apiserver_args).values())
        extra = f" renewed {time.time()}" if self.apiserver_late is not None else ""
        write_manifest(path, self.name, manifest_uid(
            [str(a) for a in cluster.get("apiserver_args", [])] + list(self.apiserver_args),
            files, path, extra))

    def _replace_late(self, seconds: float) -> None:
        if not self.stop.wait(seconds):
            log("info", "kube-apiserver static pod replaced by the kubelet")
            _restart_apiserver()

    def _start_etcd(self) -> None:
        """The member before the API server, as both engines start theirs. k3s starts its
        embedded member at every start. rke2's is a static pod the kubelet leaves alone
        unless its manifest changed (rke2 rewrites it at start; a renewed certificate or
        a changed etcd arg changes it): the lab is told so (Lab.etcd_manifest_changed),
        and then the pod is recreated. A member that is not running is started either way."""
        if not ETCD_SERVICE.exists():
            return  # a lab without etcd members
        import subprocess

        changed = self.data_dir / ETCD_MANIFEST_CHANGED
        command = "up"
        if self.distro == "rke2" and changed.exists():
            changed.unlink()
            command = "restart"
            log("info", "etcd static pod manifest changed: recreating the etcd pod")
        subprocess.run(["sv", command, str(ETCD_SERVICE)], capture_output=True, check=False,
                       timeout=30)

    def _stop_etcd(self) -> None:
        if self.distro != "k3s" or self.role != "controller" or not ETCD_SERVICE.exists():
            return
        import subprocess

        # Embedded: the member ends with the engine (waited for, as k3s stops etcd before
        # it exits).
        subprocess.run(["sv", "-w", "15", "stop", str(ETCD_SERVICE)], capture_output=True,
                       check=False, timeout=30)

    def _heartbeats(self, every: float, posted: bool) -> None:
        """Update the node's status like a kubelet, until the engine stops (engine_node.py:
        it is posted only when it changed); the API server's mirror pod's status on its
        own clock, as the kubelet's status manager posts a pod's change once its PLEG
        relists the containers (every second: kubernetes pkg/kubelet/kubelet.go
        plegRelistPeriod), not at the node's heartbeat. An update that fails is tried again
        at the next second, not a heartbeat later: a kubelet keeps trying its first status
        until it lands (kubelet_node_status.go, fastStatusUpdateOnce) and retries a failed
        update at once (nodeStatusUpdateRetry)."""
        due = time.monotonic() + (every if posted else PLEG_RELIST)
        while not self.stop.wait(min(PLEG_RELIST, max(0.0, due - time.monotonic()))):
            if self.mirror is not None:
                self.mirror.sync()
            if self.node and time.monotonic() >= due:
                posted = self.node.report(ready=self.ready)
                due = time.monotonic() + (every if posted else PLEG_RELIST)

    def _leases(self, every: float, renewed: bool) -> None:
        """Renew the node's Lease every heartbeat, until the engine stops: the kubelet's
        lease controller, a loop of its own beside the status updates, so a slow status
        update never holds a renewal back (k8s.io/component-helpers/apimachinery/lease/
        controller.go). A renewal that fails is tried again after a backoff from 200 ms,
        doubling up to 7 s (its backoffEnsureLease's maxBackoff), never later than the
        next heartbeat."""
        backoff = LEASE_RETRY
        wait = every if renewed else backoff
        while not self.stop.wait(wait):
            if self.node is None:
                return
            if self.node.renew_lease():
                backoff, wait = LEASE_RETRY, every
            else:
                wait, backoff = min(backoff, every), min(2 * backoff, LEASE_RETRY_MAX)

    def serve(self) -> None:
        """Run until asked to stop. In slices: CPython runs a signal's handler only in the
        main thread and only between bytecodes, and a SIGTERM the kernel hands to another
        thread (k3s's in-process API server has many) does not wake a main thread blocked
        in an untimed wait: such a k3s ignored its stop for the 300 s of a restart's wait
        while the availability bench kept its API server busy."""
        while not self.terminating:
            time.sleep(SLICE)
        self.stop.set()  # the threads' own waits end: here, where no lock is held

    def terminate(self, signum: int, frame: object) -> None:
        """SIGTERM's handler: a flag, no more. It runs on the main thread between two
        bytecodes, in the middle of whatever that thread holds; Event.set() takes the
        Event's lock, which the main thread holds for a moment each time its own
        Event.wait() times out, and a handler that lands there waits for itself for ever
        (CI, 2026-12-04: an agent that took TERM and was still running 49 s later, so
        the apply's stop timed out). The main thread's waits are time.sleep slices that
        look at the flag."""
        self.terminating = True

    def shutdown(self) -> None:
        self.state_path.unlink(missing_ok=True)
        if self.api_server is not None:
            self.api_server.shutdown()
            self.api_server.server_close()
        self._stop_etcd()
        log("info", f"{self.distro} {self.role} stopped")

    def _write_state(self, state: dict[str, Any]) -> None:
        # Atomic, so a reader never sees a half-written file.
        self.lab_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state) + "\n")
        tmp.rename(self.state_path)


def _restart_apiserver() -> None:
    import subprocess

    subprocess.run(["sv", "restart", APISERVER_SERVICE], capture_output=True, check=False,
                   timeout=30)


def _any_server_context() -> ssl.SSLContext:
    """A client context that only asks whether the local API server answers. Made once a
    wait, and bare: ssl.create_default_context() loads the system's CA store, 43 ms of
    CPU each time on the lab's machine, and the wait asked every 0.1 s (43 % of a core
    for as long as an rke2 controller waited for its API server)."""
    import ssl  # here: a k3s engine or an agent never needs it

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _readyz_ok(context: ssl.SSLContext) -> bool:
    """The local API server is ready but for the lab's own hook (which waits for us)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen("https://127.0.0.1:6443/readyz?verbose", timeout=2,
                                    context=context) as response:
            body = response.read().decode()
    except urllib.error.HTTPError as exc:
        body = exc.read().decode()
    except (OSError, ValueError):
        return False
    failed = [ln for ln in body.splitlines() if ln.startswith("[-]")]
    return "[+]etcd ok" in body and all("lab-engine-ready" in ln for ln in failed)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="engine.py")
    parser.add_argument("--distro", required=True, choices=("rke2", "k3s"))
    parser.add_argument("--role", choices=("controller", "worker"))
    parser.add_argument("command", nargs="?")
    args, rest = parser.parse_known_args(argv)
    if args.role is None:  # the wrapper may leave it out: the subcommand says it
        args.role = "worker" if args.command == "agent" else "controller"
    # The subcommand's own flags (the unit's ExecStart): read with the config files.
    args.flags = rest
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.command not in ("server", "agent"):
        print(f"Incorrect Usage: {args.distro}: unknown command {args.command!r} "
              "(the lab engine knows server, agent, --version)", file=sys.stderr)
        return 1
    engine = Engine(args.distro, args.role, args.flags)
    # Before start(), so a stop request during start-up is not lost.
    signal.signal(signal.SIGTERM, engine.terminate)
    try:
        try:
            engine.start()
        except EngineError as exc:
            log("fatal", str(exc))
            event("failed")
            return 1
        engine.serve()
    except Stopped:
        pass
    event("stopping")
    try:
        engine.shutdown()
    finally:
        event("stopped")
    return 0


def entry() -> None:
    """The process's whole life: /usr/local/bin/lab-engine.py calls this."""
    code = main()
    # Out at once, as the real (Go) engine is once it has shut down: the interpreter's own
    # finalization takes ~75 ms of CPU after the "stopped" event, and with eight engines
    # stopping together on the lab's shared CPUs that showed as 0.1-0.2 s more per stop.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
