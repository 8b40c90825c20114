"""The commands that stop and start the engine service, per init system.

`systemctl start` of an engine that never becomes ready blocks forever, and so can an
openrc start script; a start here only asks the init system to start the service and
returns. Waiting for the state is the restart script's business, on the host
(swap_script.py).
"""

from __future__ import annotations

from planner.errors import CargoshipError
from planner.hosts.batch import quote


class ServiceError(CargoshipError):
    pass


def stop_command(init: str, service: str) -> str:
    svc = quote(service)
    if init == "systemd":
        return f"systemctl stop {svc}"
    if init == "runit":
        return f"sv down {runit_dir(service)}"  # asks, returns; the caller polls
    if init == "openrc":
        return f"rc-service {svc} stop"
    raise ServiceError(f"cannot stop {service}: unsupported init system {init!r}")


def start_command(init: str, service: str) -> str:
    svc = quote(service)
    if init == "systemd":
        return f"systemctl start --no-block {svc}"
    if init == "runit":
        return f"sv up {runit_dir(service)}"
    if init == "openrc":
        # openrc has no --no-block: detach the start script and poll instead.
        return f"setsid rc-service {svc} start </dev/null >/dev/null 2>&1 &"
    raise ServiceError(f"cannot start {service}: unsupported init system {init!r}")


def runit_dir(service: str) -> str:
    """Shell: the service's runit directory, wherever the host keeps them."""
    svc = quote(service)
    return (f"\"$(for d in /etc/service /var/service /service; do "
            f"[ -e \"$d\"/{svc} ] && echo \"$d\"/{svc} && break; done)\"")
