"""Where each engine keeps things, and the facts about the engine installed on a host."""

from __future__ import annotations

from dataclasses import dataclass

from ..hosts.batch import Fact, FactParseError, Output, quote
from .bounds import check_size
from .engine_version import EngineVersion, VersionError, parse_version_output
from .os_release import INIT_SYSTEM

# What a host's own programs say goes into a line of at most this many bytes (printf's
# precision, no program started for it): a binary's --version or a status line may print
# anything, for as long as it likes.
LINE_BYTES = 1024
# The engine fact's whole output: four such lines and a path.
MAX_OUTPUT = 16 << 10


@dataclass(frozen=True)
class DistroLayout:
    distro: str
    binary: str
    controller_service: str
    worker_service: str
    config_dir: str
    data_dir: str

    def service(self, role: str) -> str:
        return self.controller_service if role == "controller" else self.worker_service

    @property
    def registries_path(self) -> str:
        return f"{self.config_dir}/registries.yaml"

    @property
    def manifests_dir(self) -> str:
        return f"{self.data_dir}/server/manifests"


LAYOUTS = {
    "rke2": DistroLayout("rke2", "rke2", "rke2-server", "rke2-agent", "/etc/rancher/rke2",
                         "/var/lib/rancher/rke2"),
    "k3s": DistroLayout("k3s", "k3s", "k3s", "k3s-agent", "/etc/rancher/k3s",
                        "/var/lib/rancher/k3s"),
}


@dataclass(frozen=True)
class EngineFacts:
    binary: str | None
    version: EngineVersion | None
    version_error: str | None  # the binary exists but its version is unreadable
    other_distro: str | None  # the *other* engine's binary found instead
    service_state: str  # "running", "stopped", "failed", "absent" or "unknown"

    @property
    def installed(self) -> bool:
        return self.binary is not None


def status_snippet(init: str, service: str) -> str:
    """Prints one `state <init> <status line>` line (or `state absent` / `state unknown`).
    `auto`: the init system is found on the host, as INIT_SYSTEM finds it (so the snippet
    can be read before the init system is known: hosts/snapshot.py)."""
    if init == "auto":
        branches = " ".join(f"{name}) {status_snippet(name, service)};;"
                            for name in ("systemd", "runit", "openrc"))
        return f"case \"$({INIT_SYSTEM.command})\" in {branches} *) echo state unknown;; esac"
    svc = quote(service)
    line = f"'state {init} %.{LINE_BYTES}s\\n'"
    if init == "systemd":
        return (f"if systemctl cat {svc} >/dev/null 2>&1; then "
                f"printf {line} \"$(systemctl is-active {svc})\"; else echo state absent; fi")
    if init == "runit":
        return (f"s=; for d in /etc/service /var/service /service; do "
                f"[ -e \"$d\"/{svc} ] && {{ s=\"$d\"/{svc}; break; }}; done; "
                f"if [ -n \"$s\" ]; then st=$(sv status \"$s\" 2>&1); st=${{st%%\n*}}; "
                # runit's `check` is its Type=notify: a process that runs but has not
                # passed it is starting, as systemd says "activating" until READY.
                f"case \"$st\" in run:*) if [ -x \"$s\"/check ] && "
                f"! (cd \"$s\" && ./check) >/dev/null 2>&1; then st=\"starting: $st\"; fi;; "
                f"esac; printf {line} \"$st\"; "
                f"else echo state absent; fi")
    if init == "openrc":
        return (f"if [ -e /etc/init.d/{svc} ]; then "
                f"printf {line} \"$(rc-service {svc} status 2>&1 | head -n 1)\"; "
                f"else echo state absent; fi")
    return "echo state unknown"


def engine_fact(layout: DistroLayout, role: str, init: str) -> Fact[EngineFacts]:
    binary = quote(layout.binary)
    other = quote("k3s" if layout.distro == "rke2" else "rke2")
    command = (
        f"b=$(command -v {binary} 2>/dev/null); "
        f"if [ -n \"$b\" ]; then echo \"binary $b\"; "
        # Its first line, read by the shell itself (head and sed would be two more
        # programs started on every host); the rest is left unread, as head leaves it.
        f"\"$b\" --version 2>&1 | {{ if IFS= read -r v || [ -n \"$v\" ]; then "
        f"printf 'version %.{LINE_BYTES}s\\n' \"$v\"; fi; }}; fi; "
        f"o=$(command -v {other} 2>/dev/null); [ -n \"$o\" ] && echo \"other {layout.distro}\"; "
        f"{status_snippet(init, layout.service(role))}"
    )
    return Fact(f"{layout.distro} engine", command, _parse_engine)


def _parse_engine(out: Output) -> EngineFacts:
    binary = version_text = other = None
    state = "unknown"
    for line in check_size(out, MAX_OUTPUT, "the engine facts").splitlines():
        word, _, rest = line.partition(" ")
        if word == "binary":
            binary = rest.strip()
        elif word == "version":
            version_text = rest
        elif word == "other":
            other = "k3s" if rest.strip() == "rke2" else "rke2"
        elif word == "state":
            state = parse_service_state(rest)
    version = error = None
    if binary is not None:
        try:
            version = parse_version_output(version_text or "")
        except VersionError as exc:
            error = str(exc)
    return EngineFacts(binary, version, error, other if binary is None else None, state)


def parse_service_state(text: str) -> str:
    """`systemd active`, `runit run: /etc/service/x: (pid 1) 5s` (`runit starting: run: ...`
    while its check script fails), `openrc * status: started`."""
    kind, _, rest = text.strip().partition(" ")
    rest = rest.strip()
    if kind == "absent":
        return "absent"
    if kind == "systemd":
        return {"active": "running", "activating": "starting", "failed": "failed",
                "inactive": "stopped"}.get(rest, "unknown")
    if kind == "runit":
        if rest.startswith("run:"):
            return "running"
        if rest.startswith("starting:"):
            return "starting"
        if rest.startswith("down:"):
            return "stopped"
        if rest.startswith("fail:") or rest.startswith("warning:"):
            return "failed"
        return "unknown"
    if kind == "openrc":
        if rest.endswith("started"):
            return "running"
        if rest.endswith("stopped"):
            return "stopped"
        if rest.endswith("crashed"):
            return "failed"
        return "unknown"
    if kind == "unknown":
        return "unknown"
    raise FactParseError(f"unexpected service state line {text[:60]!r}")
