"""Fresh readiness: after a restart, the host is back only when it really serves again.

A node's Ready condition outlives its engine: the kubelet stops posting, and the node
reads Ready until the node-monitor grace period (40 s; 50 s from Kubernetes 1.32) has
passed. Accepting that stale Ready after a restart would move on to the next controller
while this one's etcd member and API server are still down. So a host is back when:

* its engine process is new (not the one stopped) and the service runs;
* its node posted status after the restart: the Ready condition is True with a
  lastHeartbeatTime later than the host's clock once the old engine was down (the kubelet
  stamps its heartbeats with that same clock, so no clock skew between cargoship and the
  host matters; a restarted kubelet posts its status at once);
* for a controller: its own API server answers /readyz, whose etcd check reaches the
  node's own etcd member (rke2 and k3s point their API server at the local member only).

The engine is seen from the host, where the restart script (swap_script.py) probes it and
reports each change; the node through the API's watch (watch.py). Nothing is polled but a
controller's /readyz, which has no watch.

A crash loop is recognised while waiting, not only at the timeout: the engine service
restarting on its own (systemd's NRestarts, runit's "down, want up" between attempts, new
process ids), or the API server's static pod restarting (its log files in
/var/log/pods/kube-system_kube-apiserver-*/kube-apiserver/<restart>.log, as the kubelet
keeps them). The error then carries the last lines of the engine's and the API server's
logs from the host.
"""

from __future__ import annotations

import copy
import datetime
import logging
import re
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from planner.errors import CargoshipError
from planner.facts.distro import parse_service_state
from planner.hosts.batch import quote
from planner.kube import official_client, raw_get
from planner.kube_bounds import AnswerRefused
from planner.safetext import decimal

from .mirror_pod import MirrorView, crash_restarts, fresh
from .remote import HostWriter

log = logging.getLogger("cargoship.executor")

APISERVER_LOGS = "/var/log/pods/kube-system_kube-apiserver-*/kube-apiserver"
def apiserver_manifest(data_dir: str) -> str:
    """rke2's API server static pod manifest, under the engine's data dir (data-dir)."""
    return f"{data_dir.rstrip('/')}/agent/pod-manifests/kube-apiserver.yaml"


APISERVER_MANIFEST = apiserver_manifest("/var/lib/rancher/rke2")
# Restarts on its own after our start that make a crash loop (one can be a hiccup).
CRASH_RESTARTS = 2
LOG_LINES = 8  # shown per log, the newest
LOG_READ = 200  # read per log, then those from before the restart left out
LOG_WIDTH = 220  # characters shown of one log line
POLL_CAP = 1.0
READYZ_TIMEOUT = 5


class NotBackError(CargoshipError):
    """The engine or its node did not come back; the message says what was last seen (one
    line), `log` the host's log lines since the restart (shown under it, indented)."""

    def __init__(self, message: str, log: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.log = log


class CrashLoopError(NotBackError):
    """The engine or its API server keeps restarting."""


@dataclass(frozen=True)
class EngineState:
    state: str  # parse_service_state's word
    pid: int | None
    restarts: int | None  # systemd's NRestarts; None where the init system has no count
    auto_restart: bool  # down, but the supervisor will start it again by itself
    apiserver_logs: int  # the API server static pod's log files: 1 + its restarts
    # rke2: the uid of the API server's static pod manifest (mirror_pod.py); "" elsewhere.
    apiserver_manifest: str = ""


def parse_probe(text: str) -> EngineState:
    state, pid, restarts, auto, logs, manifest = "unknown", None, None, False, 0, ""
    for line in text.splitlines():
        word, _, rest = line.partition(" ")
        if word == "state":
            state = parse_service_state(rest)
            found = re.search(r"\(pid (\d+)\)", rest)
            pid = int(found.group(1)) if found and state in ("running", "starting") \
                else pid
            # runit between two attempts: "down: /etc/service/x: 0s, normally up, want up"
            auto = auto or (state == "stopped" and "want up" in rest)
        elif word == "show":
            props = dict(p.split("=", 1) for p in rest.split() if "=" in p)
            pid = decimal(props.get("MainPID", "")) or None
            restarts = decimal(props.get("NRestarts", ""))
            auto = auto or props.get("SubState") == "auto-restart"
        elif word == "apiserver-logs" and (count := decimal(rest.strip())) is not None:
            logs = count
        elif word == "apiserver-manifest" and rest.strip().isalnum():
            manifest = rest.strip()[:64]
    return EngineState(state, pid, restarts, auto, logs, manifest)


def log_tail_script(init: str, service: str, controller: bool, lines: int = LOG_READ,
                    since: int | None = None) -> str:
    svc = quote(service)
    if init == "systemd":
        after = f" --since @{int(since)}" if since is not None else ""
        engine = f"journalctl -u {svc} -n {lines}{after} --no-pager -o cat 2>/dev/null"
    elif init == "openrc":
        engine = f"tail -n {lines} /var/log/{svc}.log 2>/dev/null"
    else:  # runit: svlogd's current file
        engine = (f"for f in /var/log/{svc}/current /etc/service/{svc}/log/main/current; do "
                  f"[ -s \"$f\" ] && {{ tail -n {lines} \"$f\"; break; }}; done")
    script = f"echo '== engine'; {engine}"
    if controller:
        # The newest non-empty log of the API server pod: the one that says why it died.
        script += (f"; echo '== kube-apiserver'; for f in $(ls -t {APISERVER_LOGS}/*.log "
                   f"2>/dev/null); do [ -s \"$f\" ] && {{ tail -n {lines} \"$f\"; break; }}; "
                   "done")
    return script + "; true"


# A log line's own time, where it has one: svlogd's `-tt` (2024-05-01_12:00:00.12345) or
# the kubelet's pod logs (2024-05-01T12:00:00.123456789Z stderr F ...), both UTC.
_STAMP = re.compile(r"(\d{4}-\d\d-\d\d)[_T](\d\d:\d\d:\d\d)")


_SVLOGD = re.compile(r"^\d{4}-\d\d-\d\d_\d\d:\d\d:\d\d\.\d+ (?=\S)")


def _stamp(line: str) -> int | None:
    match = _STAMP.match(line)
    if not match:
        return None
    try:
        when = datetime.datetime.fromisoformat(f"{match.group(1)}T{match.group(2)}+00:00")
    except ValueError:
        return None
    return int(when.timestamp())


def log_tail(host: HostWriter, init: str, service: str, controller: bool,
             since: int | None = None) -> tuple[str, ...]:
    """The logs' last lines since `since` (the host's clock: the engine's stop), for people:
    `engine log since the restart:` then its lines, indented, at most LOG_LINES of each
    log, each at most LOG_WIDTH characters. Lines stamped before `since` are left out."""
    try:
        text = host.run_root(log_tail_script(init, service, controller, since=since),
                             check=False).stdout.decode("utf-8", "replace")
    except CargoshipError as exc:
        return (f"(could not read the logs: {exc})",)
    out: list[str] = []
    name, body = "", list[str]()
    when = "since the restart" if since is not None else "(last lines)"
    for line in [*text.splitlines(), "== end"]:
        if line.startswith("== "):
            if name and body:
                kept = body[-LOG_LINES:]
                more = f" (last {len(kept)} of {len(body)} lines)" if len(body) > len(kept) \
                    else ""
                out.append(f"{name} log {when}{more}:")
                out += ["  " + _bounded(ln) for ln in kept]
            name, body = line[3:], []
        elif line.strip():
            stamp = _stamp(line.strip())
            if since is None or stamp is None or stamp >= since:
                # svlogd's stamp goes: the engines stamp their own lines (time="...").
                body.append(_SVLOGD.sub("", line.strip(), count=1))
    return tuple(out) or ("(the logs have nothing since the restart)",)


def _bounded(line: str) -> str:
    return line if len(line) <= LOG_WIDTH else line[:LOG_WIDTH - 1] + "…"


def ready_and_heartbeat(node: dict[str, Any]) -> tuple[bool, datetime.datetime | None]:
    """A node object (as the API's JSON) -> its Ready status and lastHeartbeatTime."""
    for cond in (node.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            beat = cond.get("lastHeartbeatTime")
            try:
                when = datetime.datetime.fromisoformat(str(beat).replace("Z", "+00:00")) \
                    if beat else None
            except ValueError:
                when = None
            return cond.get("status") == "True", when
    return False, None


def point_at(admin: dict[str, Any], address: str) -> dict[str, Any]:
    """The admin kubeconfig with its server on `address` (same port and scheme)."""
    config = copy.deepcopy(admin)
    cluster = config["clusters"][0]["cluster"]
    server = urllib.parse.urlsplit(cluster["server"])
    host = f"[{address}]" if ":" in address else address
    netloc = f"{host}:{server.port}" if server.port else host
    cluster["server"] = urllib.parse.urlunsplit(server._replace(netloc=netloc))
    return config


def readyz_probe(admin: dict[str, Any], address: str) -> Callable[[], tuple[bool, str]]:
    """Ask that controller's own API server /readyz (with the admin's credentials)."""
    client: list[Any] = []

    def probe() -> tuple[bool, str]:
        import kubernetes  # slow to import; only a restart of a controller needs it

        try:
            if not client:
                client.append(official_client(point_at(admin, address)).api_client)
            response = raw_get(client[0], "/readyz", query=[("verbose", "true")],
                               timeout=READYZ_TIMEOUT)
            body = response.data.decode("utf-8", "replace")
        except kubernetes.client.ApiException as exc:
            failed = [ln for ln in str(exc.body or "").splitlines() if ln.startswith("[-]")]
            return False, f"/readyz: HTTP {exc.status}" + (
                f" ({'; '.join(failed)})" if failed else "")
        except AnswerRefused as exc:  # a drip or a flood: cut off, asked again later
            return False, f"/readyz: {exc}"
        except Exception as exc:  # noqa: BLE001 - connection refused, TLS, timeout: not up
            return False, f"/readyz: {type(exc).__name__}: {str(exc)[:200]}"
        return readyz_verdict(body)

    return probe


# kube-apiserver's etcd checks in /readyz: `etcd`, and from Kubernetes 1.26 also
# `etcd-readiness` (staging/src/k8s.io/apiserver/pkg/server/options/etcd.go); kine (k3s's
# sqlite) answers `etcd` too.
ETCD_CHECKS = ("[+]etcd ok", "[+]etcd-readiness ok")


def readyz_verdict(body: str) -> tuple[bool, str]:
    """/readyz?verbose's body: ready when no check failed and an etcd check passed."""
    lines = [ln.strip() for ln in body.splitlines()]
    failed = [ln for ln in lines if ln.startswith("[-]")]
    if failed:
        return False, "/readyz: " + "; ".join(failed)
    if not any(check in lines for check in ETCD_CHECKS):
        return False, "/readyz: no etcd check passed"
    return True, "/readyz ok"


@dataclass
class Waiter:
    """Judges, from what is seen of a host after its engine was started, whether it is
    back (see the module doc). It is told things as they happen (probes of the engine from
    the host, versions of the node from the API's watch) and never asks by itself, except
    a controller's /readyz, which has no watch."""

    host: HostWriter  # only to read the logs' last lines for an error
    init: str
    service: str
    node: str
    controller: bool
    readyz: Callable[[], tuple[bool, str]] | None
    # rke2: reads the API server's mirror pod (mirror_pod.py), and what it said before the
    # stop; None elsewhere.
    mirror: Callable[[], MirrorView | str] | None = None
    mirror_before: MirrorView | str | None = None
    before: EngineState | None = None  # just before the engine was stopped
    # A rollback: the API server pod of the manifest on the host when it began is the
    # config being undone (mirror_pod.crash_restarts' `undone`).
    undoing: bool = False
    stopped_at: int | None = None  # the host's clock (whole seconds) once it was down
    _state: EngineState | None = None
    _node: tuple[bool, datetime.datetime | None] | str = "nothing seen yet"
    _pids: set[int] = field(default_factory=set)
    _auto_restarts: int = 0
    _was_auto: bool = False
    _mirror: MirrorView | str = "not read yet"
    _mirror_read_at: float = float("-inf")  # monotonic

    def probed(self, name: str, state: EngineState) -> None:
        """A probe from the host: `before` the stop, right before the start (`starting`:
        the API server pod of the old config may have restarted once more while the
        engine was stopping; that restart is not the new config's), or after it."""
        if name == "before":
            self.before = state
        elif name == "starting":
            self.before = replace(self.before or state, apiserver_logs=state.apiserver_logs)
        else:
            self._crash_loop_check(state, self.before)
            self._state = state

    def node_seen(self, node: dict[str, Any]) -> None:
        seen = ready_and_heartbeat(node)
        kept = self._node
        if isinstance(kept, tuple) and kept[1] and seen[1] and seen[1] < kept[1]:
            return  # an older look (a fresh read sent before a watch event) arriving late
        self._node = seen

    def node_unreadable(self, why: str) -> None:
        self._node = f"unreadable ({why[:200]})"

    def waiting_for(self, ask_readyz: bool = True) -> str:
        """What the host still lacks ("" when it is back). `ask_readyz`: whether the
        controller's /readyz may be asked now (it is polled, so the caller paces it);
        when not, an otherwise-back controller waits for it."""
        state = self._state
        manifest = state.apiserver_manifest if state is not None and \
            self.mirror is not None else ""
        if manifest and ask_readyz:
            self._read_mirror(manifest)  # a crash loop raises here
        if state is None or state.state != "running":
            return f"engine: {self.service} is {state.state if state else 'not seen yet'}"
        if self.before is not None and state.pid is not None and state.pid == self.before.pid:
            return f"engine: {self.service} still runs its old process {state.pid}"
        if isinstance(self._node, str):
            return f"node: {self.node} {self._node}"
        ready, beat = self._node
        if not ready:
            return f"node: {self.node} not Ready"
        if beat is None or self.stopped_at is None or \
                beat <= datetime.datetime.fromtimestamp(self.stopped_at, datetime.UTC):
            return f"node: {self.node} has posted no status since the restart"
        if self.controller and self.readyz is not None:
            if not ask_readyz:
                return "API server: /readyz not asked yet"
            ok, why = self.readyz()
            if not ok:
                return f"API server: {why}"
        if manifest:  # rke2: the API server that answered must be the new one
            why = fresh(self._mirror, manifest, self.before.apiserver_manifest
                        if self.before is not None else "", self.stopped_at)
            if why:
                return f"API server: {why}"
        return ""

    def _read_mirror(self, manifest: str) -> None:
        """The mirror pod, at most every POLL_CAP seconds; a restart count risen beyond
        the start's own is a crash loop (raised)."""
        now = time.monotonic()
        if self.mirror is None or now - self._mirror_read_at < POLL_CAP:
            return
        self._mirror_read_at = now
        self._mirror = self.mirror()
        undone = self.before.apiserver_manifest if self.undoing and self.before else ""
        restarts = crash_restarts(self._mirror, self.mirror_before, manifest, undone)
        if restarts is not None and restarts >= CRASH_RESTARTS:
            raise CrashLoopError(
                f"kube-apiserver is crash-looping (its mirror pod counts {restarts} "
                f"restart(s) since {self.service} was started)",
                log_tail(self.host, self.init, self.service, self.controller,
                         self.stopped_at))

    def not_back(self, timeout: float, seen: str) -> NotBackError:
        return NotBackError(f"not back after {timeout:g} s (last seen: {seen})",
                            log_tail(self.host, self.init, self.service, self.controller,
                                     self.stopped_at))

    def _crash_loop_check(self, state: EngineState, before: EngineState | None) -> None:
        if state.pid is not None and (before is None or state.pid != before.pid):
            self._pids.add(state.pid)
        if state.auto_restart and not self._was_auto:
            self._auto_restarts += 1
        self._was_auto = state.auto_restart
        engine_restarts = max(len(self._pids) - 1, self._auto_restarts)
        if state.restarts is not None and before is not None and before.restarts is not None:
            engine_restarts = max(engine_restarts, state.restarts - before.restarts)
        what = None
        if engine_restarts >= CRASH_RESTARTS or state.state == "failed":
            what = f"{self.service} is crash-looping ({engine_restarts} restart(s) on its " \
                   f"own since it was started; now {state.state})"
        elif self.controller and before is not None and \
                state.apiserver_logs - before.apiserver_logs > CRASH_RESTARTS:
            # One new pod log per engine start is normal; more are the pod's restarts.
            restarts = state.apiserver_logs - before.apiserver_logs - 1
            what = f"kube-apiserver is crash-looping ({restarts} restart(s) since " \
                   f"{self.service} was started)"
        if what:
            raise CrashLoopError(what, log_tail(self.host, self.init, self.service,
                                                self.controller, self.stopped_at))
