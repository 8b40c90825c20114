"""A lab: real SSH hosts on this machine, started, used and removed as one unit.

State lives in DIR/lab.json so that `python -m tests.lab exec/down` in another process
finds the hosts `up` started.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from . import etcd as members_of_etcd
from . import hostfs, network
from .spec import DEFAULT_VERSIONS, HostSpec, LabHost, Timing

INIT_SCRIPT = Path(__file__).with_name("init.sh")
# What a host's init starts its services with, as systemd or runit would: not the
# environment of whoever ran `lab up` (a PYTHONDONTWRITEBYTECODE there made every lab
# engine compile its modules at every start).
HOST_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "LANG": "C.UTF-8"}
LAB_REGISTRIES = {"mirrors": {"docker.io": {"endpoint": ["https://mirror.lab.internal:5000"]}}}
START_TIMEOUT = 60.0
# What Lab.api_fault takes (tests/lab/kubeapi_hostile.py KINDS and MODES, which it checks).
API_FAULT_KINDS = ("read-node", "list-nodes", "watch-nodes", "list-pods", "watch-pods",
                   "patch-node", "evict", "readyz")
API_FAULT_MODES = ("shape", "slow", "endless", "huge")


class LabError(RuntimeError):
    pass


def _wait(what: str, check: Any, timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    delay = 0.01
    while not check():
        if time.monotonic() > deadline:
            raise LabError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def _settled(service_dir: Path) -> None:
    """Date a host's service directory back a minute. runsvdir starts nothing from a
    directory changed within the last second, and looks again only a second later (runit
    src/runsvdir.c: `if (s.st_mtime +1 < now)` before it scans), so a directory Lab.up had
    just written cost every host a second before its sshd and engine started. A real
    host's services were installed long before it boots."""
    past = time.time() - 60
    os.utime(service_dir, (past, past))


def _listening(address: str, port: int = 22) -> bool:
    try:
        with socket.create_connection((address, port), timeout=0.5) as sock:
            return sock.recv(4).startswith(b"SSH-")
    except OSError:
        return False


@dataclass
class Lab:
    dir: Path
    index: int
    distro: str
    version: str
    hosts: list[LabHost] = field(default_factory=list)
    tag: str = field(default_factory=network.new_tag)
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    # False: no Kubernetes API stand-in, so engines run without joining a cluster (no
    # heartbeats): what a plan benchmark of hundreds of hosts can afford on a small machine.
    kube_api: bool = True
    timing: Timing = field(default_factory=Timing)
    # True (Lab.up's default wherever there is an API): every controller runs a real etcd
    # member, one cluster (tests/lab/etcd.py), as rke2 and k3s servers do; its API
    # server's readiness and writes then need its member's quorum. False: the controllers
    # share an external datastore (their config names it: datastore-endpoint), the
    # topology of k3s's "High Availability with an External DB".
    etcd: bool = False

    @property
    def api_host(self) -> LabHost | None:
        """The first controller serves the lab's Kubernetes API stand-in."""
        if not self.kube_api:
            return None
        return next((h for h in self.hosts if h.role == "controller"
                     and h.spec.engine_installed), None)

    @property
    def api_url(self) -> str:
        """The lab's datastore: its own view of the cluster (the objects themselves, or
        with etcd members an etcd client of them all)."""
        host = self.api_host
        assert host is not None, "this lab has no controller, so no Kubernetes API"
        return f"http://{host.address}:{hostfs.DATASTORE_PORT}"

    def apiserver_url(self, host: str) -> str:
        """A controller's own API server (TLS, lab CA), as clients reach it."""
        return f"https://{self.host(host).address}:{hostfs.API_PORT}"

    @property
    def pki_dir(self) -> Path:
        return self.dir / "pki"

    def api(self, method: str, path: str, body: Any = None,
            content_type: str = "application/json") -> Any:
        """Call the lab's datastore as a test would (raw HTTP, JSON in and out): the lab's
        own view, up whichever engine is down."""
        request = urllib.request.Request(
            self.api_url + path, method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": content_type})
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read() or b"null")

    def api_fault(self, kind: str, mode: str, *, node: str | None = None,
                  times: int | None = None, **params: Any) -> None:
        """Make the controllers' API servers answer requests of `kind` (read-node,
        list-nodes, watch-nodes, list-pods, watch-pods, patch-node, evict, readyz) that
        name `node` (None: any) in a hostile `mode` (shape, slow, endless, huge), `times`
        times (None: until cleared). `params` are the mode's (set=, unset=, retime=,
        declared=, interval=, rate=, bytes=, for_seconds=, fill=, write=):
        tests/lab/kubeapi_hostile.py describes them. The datastore (self.api) keeps
        answering truthfully. A host name stands for its node's name."""
        names = {h.name: h.spec.node_name() for h in self.hosts}
        fault = {"kind": kind, "mode": mode, "node": names.get(node, node) if node else None,
                 "times": times, "params": params}
        try:
            self.api("POST", "/lab/v1/faults", fault)
        except urllib.error.HTTPError as exc:
            try:
                why = json.loads(exc.read()).get("message", exc.reason)
            except ValueError:
                why = exc.reason
            raise LabError(f"the lab API refused the fault: {why}") from None
        except OSError as exc:
            raise LabError(f"the lab API is unreachable: {exc}") from None

    def clear_api_faults(self) -> None:
        """Remove every injected API fault (hostile answers and error statuses)."""
        try:
            self.api("DELETE", "/lab/v1/faults")
        except OSError as exc:
            raise LabError(f"the lab API is unreachable: {exc}") from None

    def ready_nodes(self) -> set[str]:
        try:
            nodes = self.api("GET", "/api/v1/nodes")["items"]
        except OSError:
            return set()
        return {n["metadata"]["name"] for n in nodes if any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in n.get("status", {}).get("conditions", []))}

    # -- life cycle ---------------------------------------------------------------------

    @classmethod
    def up(cls, dir: Path, hosts: list[HostSpec], distro: str = "rke2",
           version: str | None = None, kube_api: bool = True,
           timing: Timing | None = None, etcd: bool | None = None) -> Lab:
        """`etcd`: None is True with a Kubernetes API (every controller an etcd member);
        False is an external datastore (see the field)."""
        dir = Path(dir).resolve()
        if os.geteuid() != 0:
            raise LabError("the lab needs root (network, mount and PID namespaces)")
        if (dir / "lab.json").exists():
            raise LabError(f"{dir} already holds a lab; run `python -m tests.lab down --dir "
                           f"{dir}` first")
        names = [h.name for h in hosts]
        if len(set(names)) != len(names) or not hosts:
            raise LabError("host names must be unique and at least one host is needed")
        dir.mkdir(parents=True, exist_ok=True)
        index = network.claim_index(dir)
        if etcd and not kube_api:
            raise LabError("etcd members need the lab's Kubernetes API (kube_api)")
        etcd = kube_api if etcd is None else etcd
        lab = cls(dir, index, distro, version or DEFAULT_VERSIONS[distro], kube_api=kube_api,
                  # A copy: set_engine_start_delay changes this lab's, not the caller's
                  # (a module's shared Timing, the next test's lab).
                  timing=replace(timing) if timing else Timing(), etcd=etcd)
        try:
            lab._start(hosts)
        except BaseException:
            lab.down()
            raise
        return lab

    def _start(self, specs: list[HostSpec]) -> None:
        key = self.dir / "id_ed25519"
        if not key.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "lab-client",
                            "-f", str(key)], check=True)
        pubkey = key.with_suffix(".pub").read_text()
        self.hosts = [
            LabHost(spec, i, network.host_address(self.index, i),
                    f"cs{self.tag}-{spec.name}", str(self.dir / "hosts" / spec.name))
            for i, spec in enumerate(specs)
        ]
        self._save()  # so that down() can clean up even if starting fails half-way
        network.create_bridge(self.index)
        network.create_hosts(self.index, self.tag,
                             [(h.netns, h.address, h.index) for h in self.hosts])

        api_host = self.api_host

        if api_host is not None:
            from .pki import lab_pki

            lab_pki(self.pki_dir)  # once, before the hosts' certificates are issued from it
            if self.etcd:
                from .pki import etcd_cas

                etcd_cas(self.pki_dir)  # the same, for the members' CAs

        members = [h for h in self.hosts if h.role == "controller" and h.spec.engine_installed]
        cluster = members_of_etcd.initial_cluster(self.tag, members) if self.etcd else None

        def prepare(host: LabHost) -> str:
            api: dict[str, object] | None = None
            if api_host is not None:
                api = {"api": self.api_url, "token": self.token,
                       "stale_after": self.timing.node_grace}
            member = {**cluster, "name": members_of_etcd.member_name(self.tag, host.name)} \
                if cluster is not None and host in members else None
            key = hostfs.prepare(
                Path(host.dir), host.spec, address=host.address, distro=self.distro,
                version=host.spec.engine_version or self.version, client_pubkey=pubkey,
                registries=LAB_REGISTRIES, uid=hostfs.FIRST_UID + host.index, api=api,
                pki=self.pki_dir, etcd=member)
            if host.spec.engine_installed:
                self._write_timing(host, boot=True)
            return key

        with ThreadPoolExecutor(max_workers=8) as pool:
            host_keys = list(pool.map(prepare, self.hosts))
        if api_host is not None:
            hostfs.add_datastore(Path(api_host.dir), self.token, self.timing.node_grace,
                                 [h.address for h in members] if self.etcd else [],
                                 self.pki_dir)
        (self.dir / "known_hosts").write_text(
            "".join(f"{h.address} {k}\n" for h, k in zip(self.hosts, host_keys, strict=True)))
        for host in self.hosts:
            _settled(Path(host.dir) / "etc.upper" / "service")
            host.pid = self._launch(host)
        self._save()
        for host in self.hosts:
            self._wait_ready(host)
        if api_host is not None:
            # Node names as the engines derive them.
            expected = {h.spec.node_name() for h in self.hosts if h.spec.engine_installed}
            try:
                _wait("every node Ready in the lab's Kubernetes API",
                      lambda: expected <= self.ready_nodes())
            except LabError as exc:
                console = (Path(api_host.dir) / "console.log").read_text()[-1500:]
                raise LabError(f"{exc}; ready: {sorted(self.ready_nodes())}; API host "
                               f"console:\n{console}") from None
        for host in self.hosts:
            if host.spec.engine_installed:
                self._write_timing(host)  # the lab's timing from the engines' next start
        self.write_cluster_yaml()

    def _launch(self, host: LabHost) -> int:
        console = open(Path(host.dir) / "console.log", "ab")
        try:
            proc = subprocess.Popen(
                ["ip", "netns", "exec", host.netns, "unshare", "--uts", "--mount", "--pid",
                 "--fork", "--kill-child", "--mount-proc", "/bin/sh", str(INIT_SCRIPT),
                 host.dir],
                stdin=subprocess.DEVNULL, stdout=console, stderr=console,
                start_new_session=True,  # survives the `up` command that started it
                env=HOST_ENV)
        finally:
            console.close()
        return proc.pid

    def _wait_ready(self, host: LabHost) -> None:
        _wait(f"sshd on {host.name}", lambda: _listening(host.address))
        if host.spec.engine_installed:
            marker = Path(host.dir) / "rancher-var" / self.distro / "lab-engine.json"
            _wait(f"the engine on {host.name}", marker.exists)

    def down(self) -> None:
        """Remove everything `up` made; safe to call twice or on a half-started lab."""
        for host in self.hosts:
            if host.pid:
                try:
                    os.kill(host.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        try:
            for host in self.hosts:
                if host.pid:
                    _wait(f"{host.name} to stop", lambda h=host: not _alive(h.pid), timeout=10)
        finally:
            # Even when a host was slow to stop: its network (and whatever still runs in
            # it) goes, or the lab would outlive the run that made it.
            network.destroy(self.index, [h.netns for h in self.hosts], self.tag,
                            [h.index for h in self.hosts])
        subprocess.run(["rm", "-rf", "--one-file-system", str(self.dir / "hosts")], check=False)
        (self.dir / "lab.json").unlink(missing_ok=True)
        network.release_index(self.index)

    # -- state ----------------------------------------------------------------------------

    def _save(self) -> None:
        data = {"index": self.index, "tag": self.tag, "token": self.token, "distro": self.distro,
                "version": self.version, "kube_api": self.kube_api, "etcd": self.etcd,
                "timing": self.timing.to_json(),
                "hosts": [h.to_json() for h in self.hosts]}
        tmp = self.dir / "lab.json.tmp"
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(self.dir / "lab.json")

    @classmethod
    def load(cls, dir: Path) -> Lab:
        dir = Path(dir).resolve()
        try:
            data = json.loads((dir / "lab.json").read_text())
        except FileNotFoundError:
            raise LabError(f"no lab in {dir} (no lab.json)") from None
        except ValueError as exc:
            raise LabError(f"{dir}/lab.json is not JSON: {exc}") from None
        # Timing settings this code does not know (a lab another branch's code started)
        # are left out: taking such a lab down needs its hosts, not its timing.
        known = {f.name for f in fields(Timing)}
        try:
            settings = {k: v for k, v in dict(data.get("timing") or {}).items() if k in known}
            try:
                timing = Timing(**settings)
            except ValueError:
                timing = Timing()  # a start older code allowed: the hosts are what count
            return cls(dir, data["index"], data["distro"], data["version"],
                       [LabHost.from_json(h) for h in data["hosts"]], data["tag"],
                       data["token"], data.get("kube_api", True), timing,
                       data.get("etcd", False))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise LabError(f"{dir}/lab.json is not a lab this code can read "
                           f"({type(exc).__name__}: {exc})") from None

    def host(self, name: str) -> LabHost:
        for host in self.hosts:
            if host.name == name:
                return host
        raise LabError(f"no host {name!r} in this lab (hosts: "
                       f"{', '.join(h.name for h in self.hosts)})")

    # -- using hosts ----------------------------------------------------------------------

    def init_pid(self, name: str) -> int:
        host = self.host(name)
        children = Path(f"/proc/{host.pid}/task/{host.pid}/children").read_text().split()
        if not children:
            raise LabError(f"host {name} is not running")
        return int(children[0])

    def nsenter(self, name: str) -> list[str]:
        return ["nsenter", "--target", str(self.init_pid(name)), "--mount", "--uts", "--net",
                "--pid", "--"]

    def exec(self, host: str, cmd: list[str] | str, *, input: str | None = None,
             check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        argv = ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        result = subprocess.run([*self.nsenter(host), *argv], input=input, capture_output=True,
                                text=True, timeout=timeout, env=_host_env())
        if check and result.returncode != 0:
            raise LabError(f"{host}: {argv!r} exited {result.returncode}: "
                           f"{result.stderr.strip()[:500]}")
        return result

    def ssh_logins(self, host: str) -> int:
        """SSH connections the host's sshd authenticated since the lab started: its
        "Accepted ..." lines (sshd -e logs to the console, which runit leaves it)."""
        console = (Path(self.host(host).dir) / "console.log").read_text(errors="replace")
        return sum(line.startswith("Accepted publickey for ") for line in console.splitlines())

    def restart_sshd(self, host: str) -> None:
        """Restart the host's sshd and return once the new one answers (its banner)."""
        address = self.host(host).address
        self._restart(host, "sshd", lambda: _listening(address))

    def restart_engine(self, host: str, timeout: float = 30.0) -> None:
        """Restart the host's engine and return once a new one is READY (its check)."""
        service = self.engine_service(host)
        check = f"cd /etc/service/{service} && ./check"
        self._restart(host, service,
                      lambda: self.exec(host, check, check=False).returncode == 0, timeout)

    def _restart(self, host: str, service: str, ready: Callable[[], bool],
                 timeout: float = START_TIMEOUT) -> None:
        """`sv restart` the service, then wait for a new supervised pid and `ready`. `sv -w
        restart` alone can return at once: runit's sv (sv.c, check() for a restart)
        accepts a process that started in the same second as the request, and the old
        one's check passes until it has exited (9 of 20 back-to-back engine restarts here,
        9 of 30 for sshd). runsv starts the new process only once the old one has exited."""
        pid_file = f"/etc/service/{service}/supervise/pid"
        old = self.exec(host, ["cat", pid_file]).stdout.strip()
        # -w: sv waits for the new process's check (the engine's READY) up to this deadline,
        # not its default 7 s, which a start on a loaded machine can outlast (sv then
        # exits 1: runit's sv.c counts a timeout as a failure).
        self.exec(host, ["sv", "-w", f"{timeout:.0f}", "restart", f"/etc/service/{service}"],
                  timeout=timeout + 10)

        def new_and_ready() -> bool:
            pid = self.exec(host, ["cat", pid_file], check=False).stdout.strip()
            return pid not in ("", old) and ready()

        _wait(f"a new {service} on {host}", new_and_ready, timeout)

    def etcd_member(self, host: str, action: str) -> None:
        """stop, start, pause (SIGSTOP) or resume the host's etcd member (tests/lab/etcd.py)."""
        members_of_etcd.control(self, host, action)

    def etcd_manifest_changed(self, host: str) -> None:
        """rke2: the next start of the host's engine recreates its etcd member's pod."""
        members_of_etcd.manifest_changed(self, host)

    def etcd_call(self, host: str, path: str, body: dict[str, Any] | None = None,
                  timeout: float = 3.0) -> Any:
        """The host's member's JSON gateway (POST with `body`) or GET (/health, /metrics)."""
        return members_of_etcd.call(self, host, path, body, timeout)

    def set_clock_offset(self, host: str, seconds: int) -> None:
        lab_host = self.host(host)
        lab_host.spec.clock_offset = seconds
        hostfs.set_sshd_config(Path(lab_host.dir), lab_host.address, seconds)
        self.restart_sshd(host)
        self._save()

    def set_engine_version(self, host: str, version: str) -> None:
        lab_host = self.host(host)
        lab_host.spec.engine_version = version
        hostfs.set_engine_version(Path(lab_host.dir), self.distro, version)
        self._save()

    def set_engine_start_delay(self, seconds: float) -> None:
        """Every engine of the lab takes this long to start (from its next start on)."""
        self.timing.engine_start = seconds
        for host in self.hosts:
            if host.spec.engine_installed:
                self._write_timing(host)
        self._save()

    def _write_timing(self, host: LabHost, boot: bool = False) -> None:
        """`boot`: the lab's first start, which stands for a cluster already running when
        a test begins, not for a restart a test makes: its engines are READY at once (a
        start delay there was two seconds of every lab's start-up and modelled nothing).
        The kubelet's heartbeat is read at the start, so it is the real one either way."""
        start = 0.0 if boot else self.timing.engine_start
        hostfs.write(Path(host.dir) / "rancher-var" / self.distro / "lab-timing.json",
                     json.dumps({"start_delay": start,
                                 "heartbeat": self.timing.kubelet_heartbeat,
                                 "status_report": self.timing.node_status_report,
                                 # A controller's API server takes the second half of
                                 # the start-up, after its kubelet is up.
                                 "apiserver_start": start / 2,
                                 "manifest_after": 0.0 if boot
                                 else self.timing.apiserver_manifest_after}))

    def events(self, host: str) -> list[tuple[float, str]]:
        """The engine's state changes on a host, from /var/log/lab-engine/events.log."""
        path = Path(self.host(host).dir) / "var.upper" / "log" / "lab-engine" / "events.log"
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            when, _, name = line.partition(" ")
            out.append((float(when), name))
        return out

    def outages(self, host: str, since: float = 0.0) -> list[tuple[float, float]]:
        """(down, ready) intervals of the host's engine after `since`, from its events: down
        from `stopping` (asked to stop) or `failed` (a start that died), until the next
        `ready`; one not over (yet) ends at infinity."""
        spans: list[tuple[float, float]] = []
        down: float | None = None
        for when, name in self.events(host):
            if when < since:
                continue
            if name in ("stopping", "failed") and down is None:
                down = when
            elif name == "ready" and down is not None:
                spans.append((down, when))
                down = None
        if down is not None:
            spans.append((down, float("inf")))
        return spans

    def down_together(self, hosts: list[str], since: float = 0.0
                      ) -> list[tuple[str, str, float]]:
        """Every two of `hosts` whose engines were down at the same instant after `since`,
        with when that began, from the hosts' own events: [] if never two were."""
        spans = {host: self.outages(host, since) for host in hosts}
        both = []
        for i, first in enumerate(hosts):
            for second in hosts[i + 1:]:
                both += [(first, second, max(a[0], b[0])) for a in spans[first]
                         for b in spans[second] if a[0] < b[1] and b[0] < a[1]]
        return both

    def record_service_requests(self, host: str) -> None:
        """Record, from now on, what is asked of the host's service manager (hostfs
        SV_RECORDER): service_requests and engine_starts read it."""
        self.exec(host, f"mkdir -p {Path(hostfs.SV_REQUESTS_LOG).parent}")
        hostfs.install_sv_recorder(Path(self.host(host).dir))

    def service_requests(self, host: str, since: float = 0.0) -> list[tuple[float, str]]:
        """(when, command) of every request for the host's engine service after `since`
        (`down`, `up`, `restart`, ...), oldest first; record_service_requests starts the
        record."""
        # The host's /var is an overlay whose upper layer is var.upper.
        path = Path(self.host(host).dir, "var.upper",
                    Path(hostfs.SV_REQUESTS_LOG).relative_to("/var"))
        if not path.exists():
            return []
        service = self.engine_service(host)
        out = []
        for line in path.read_text().splitlines():
            when, cwd, *argv = line.split()
            while argv and argv[0].startswith("-"):  # sv -v, sv -w SECONDS
                argv = argv[2:] if argv[0] == "-w" else argv[1:]
            if float(when) < since or len(argv) < 2:
                continue
            # Paths as the host saw them (`sv down .` in the service's directory).
            named = [os.path.basename(os.path.normpath(os.path.join(cwd, arg)))
                     for arg in argv[1:]]
            if service in named:
                out.append((float(when), argv[0]))
        return out

    def engine_starts(self, host: str, since: float = 0.0) -> list[tuple[float, str]]:
        """(when, who) of each start of the host's engine after `since`: `asked` when its
        service was asked since the start before it for something that starts it (up,
        start, restart, once; term or kill, which runit follows with a start), else
        `supervisor`: runit's respawn of a process that ended, as systemd's Restart=always
        does. Needs record_service_requests before the starts. (An `up` to an engine
        already running starts nothing; a crash after it would be counted as asked.)"""
        asks = [when for when, command in self.service_requests(host) if command in (
            "u", "up", "start", "restart", "force-restart", "o", "once", "t", "term", "k",
            "kill")]
        starts = []
        previous = float("-inf")
        for when, name in self.events(host):
            if name != "starting":
                continue
            asked = any(previous <= ask <= when for ask in asks)
            if when >= since:
                starts.append((when, "asked" if asked else "supervisor"))
            previous = when
        return starts

    def engine_service(self, host: str) -> str:
        return hostfs.engine_service(self.distro, self.host(host).role)

    def write_cluster_yaml(self, path: Path | None = None, **overrides: Any) -> Path:
        path = path or self.dir / "cluster.yaml"
        hosts = [{"role": h.role, "ssh": {
            "address": h.address, "port": 22, "user": h.user,
            "keyPath": str(self.dir / "id_ed25519"),
            "knownHosts": str(self.dir / "known_hosts")}} for h in self.hosts]
        spec: dict[str, Any] = {
            "engine": {"distro": self.distro, "version": self.version},
            "hosts": hosts,
            "engineConfig": {"registries": LAB_REGISTRIES},
            "options": {"concurrency": {"hosts": 32, "workers": 2}},
        }
        spec.update(overrides)
        doc = {"apiVersion": "cargoship/v1", "kind": "Cluster",
               "metadata": {"name": f"lab-{self.index}"}, "spec": spec}
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (our own child, not yet reaped) is as good as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _host_env() -> dict[str, str]:
    return {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/root", "LANG": "C.UTF-8", "SVDIR": "/etc/service"}


def down_all(under: Path | None = None) -> int:
    """Remove every lab registered on this machine (or only those whose directory is
    below `under`); returns how many."""
    count = 0
    for lab_dir in network.registered_dirs():
        if under is not None and not lab_dir.is_relative_to(Path(under).resolve()):
            continue
        try:
            Lab.load(lab_dir).down()
            count += 1
        except LabError:
            continue
    return count
