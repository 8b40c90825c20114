"""Stopping and starting the engine service, per init system, without ever blocking on it.

`systemctl start` of an engine that never becomes ready blocks forever, and so can an
openrc start script; every start here only asks the init system to start the service and
returns, then polls the service state until it runs or a deadline passes.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from planner.errors import CargoshipError
from planner.facts.distro import parse_service_state, status_snippet
from planner.hosts.batch import quote

from .polling import pause
from .remote import HostWriter

# Seconds between two looks at the service state, at most; at least 0.05 (one SSH exec,
# cheap for the host), so a stop or start is seen soon after it happens.
POLL_CAP = 1.0


class ServiceError(CargoshipError):
    pass


def stop_command(init: str, service: str) -> str:
    svc = quote(service)
    if init == "systemd":
        return f"systemctl stop {svc}"
    if init == "runit":
        return f"sv down {_runit_dir(service)}"  # asks, returns; the caller polls
    if init == "openrc":
        return f"rc-service {svc} stop"
    raise ServiceError(f"cannot stop {service}: unsupported init system {init!r}")


def start_command(init: str, service: str) -> str:
    svc = quote(service)
    if init == "systemd":
        return f"systemctl start --no-block {svc}"
    if init == "runit":
        return f"sv up {_runit_dir(service)}"
    if init == "openrc":
        # openrc has no --no-block: detach the start script and poll instead.
        return f"setsid rc-service {svc} start </dev/null >/dev/null 2>&1 &"
    raise ServiceError(f"cannot start {service}: unsupported init system {init!r}")


def _runit_dir(service: str) -> str:
    svc = quote(service)
    return (f"\"$(for d in /etc/service /var/service /service; do "
            f"[ -e \"$d\"/{svc} ] && echo \"$d\"/{svc} && break; done)\"")


def state(host: HostWriter, init: str, service: str) -> str:
    result = host.run_root(status_snippet(init, service), check=False)
    line = result.stdout.decode("utf-8", "replace").strip().removeprefix("state ")
    return parse_service_state(line)


def stop(host: HostWriter, init: str, service: str, timeout: float,
         sleep: Callable[[float], None] = time.sleep) -> None:
    host.run_root(stop_command(init, service), timeout=timeout)
    _wait_for(host, init, service, {"stopped", "failed", "absent"}, timeout, sleep)


def start(host: HostWriter, init: str, service: str, timeout: float,
          sleep: Callable[[float], None] = time.sleep) -> None:
    command = start_command(init, service)
    host.run_root(command)
    # runit can drop an `sv up` that arrives just after an `sv down` of a service in its
    # restart back-off (seen on the lab: "down, normally up" for good). Starting is
    # idempotent everywhere, so a service still plainly stopped is asked again.
    _wait_for(host, init, service, {"running"}, timeout, sleep,
              nudge=lambda seen: host.run_root(command) if seen == "stopped" else None)


NUDGE_EVERY = 2.0  # seconds


def _wait_for(host: HostWriter, init: str, service: str, wanted: set[str], timeout: float,
              sleep: Callable[[float], None],
              nudge: Callable[[str], object] | None = None) -> None:
    started = time.monotonic()
    deadline = started + timeout
    next_nudge = started + NUDGE_EVERY
    seen = "unknown"
    while time.monotonic() < deadline:
        seen = state(host, init, service)
        if seen in wanted:
            return
        if nudge is not None and time.monotonic() >= next_nudge:
            nudge(seen)
            next_nudge = time.monotonic() + NUDGE_EVERY
        sleep(pause(time.monotonic() - started, POLL_CAP, floor=0.05))
    raise ServiceError(f"{host.label}: {service} is {seen}, not {' or '.join(sorted(wanted))}, "
                       f"after {timeout:g}s")
