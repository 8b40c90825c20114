"""The lab's etcd members (one per controller, unless the lab was started with etcd=False,
`--no-etcd`): their names, the initial cluster, and what a test (or `python -m tests.lab
etcd`) does to one: stop, start, pause (SIGSTOP: a member that falls behind, then answers
nothing), resume, and reading its JSON gateway and metrics from this machine with the
host's own etcd client certificate.

Each controller's member is a runit service (hostfs._add_etcd); the engine starts it
(engine.py _start_etcd), k3s's engine stops it (embedded), rke2's outlives the engine.
On k3s, `stop` and `pause` are faults a real host cannot show that way (its member lives
in the engine's process): they stand for a member that died or hangs while the engine
runs, which is what the quorum gate must see.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import ssl
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import hostfs

if TYPE_CHECKING:
    from .lab import Lab
    from .spec import LabHost

# What `sv` is asked for each action: runit's pause and cont are SIGSTOP and SIGCONT.
# The members' --election-timeout, the engines' own (hostfs.py, _add_etcd; k3s
# pkg/etcd/etcd.go): a follower campaigns only after this long without hearing from a
# leader (etcd randomizes it up to twice as long).
ELECTION_TIMEOUT = 5.0
ACTIONS = {"stop": "down", "start": "up", "pause": "pause", "resume": "cont"}


def member_name(tag: str, host_name: str) -> str:
    """`<node name>-<8 hex>`, as k3s and rke2 name members (pkg/etcd/etcd.go: the node name
    and a random suffix): stable for the lab."""
    suffix = hashlib.sha256(f"{tag}/{host_name}".encode()).hexdigest()[:8]
    return f"{host_name.lower()}-{suffix}"


def initial_cluster(tag: str, controllers: list[LabHost]) -> dict[str, str]:
    cluster = ",".join(f"{member_name(tag, h.name)}=https://{h.address}:{hostfs.ETCD_PEER_PORT}"
                       for h in controllers)
    return {"cluster": cluster, "token": f"lab-{tag}"}


def control(lab: Lab, host: str, action: str) -> None:
    if action not in ACTIONS:
        from .lab import LabError

        raise LabError(f"etcd member action {action!r}: one of {', '.join(ACTIONS)}")
    _require(lab, host)
    lab.exec(host, ["sv", ACTIONS[action], f"/etc/service/{hostfs.ETCD_SERVICE}"])


def manifest_changed(lab: Lab, host: str) -> None:
    """rke2: the next engine start recreates the member's static pod."""
    _require(lab, host)
    path = Path(lab.host(host).dir, "rancher-var", lab.distro, hostfs.ETCD_MANIFEST_CHANGED)
    path.write_text("changed\n")


def call(lab: Lab, host: str, path: str, body: dict[str, Any] | None = None,
         timeout: float = 3.0) -> Any:
    """One request to the host's member at its node address, as a client with the host's
    server-client certificate: POST with a JSON body, or GET (body None: /health,
    /metrics). JSON answers decoded, others as text; OSError when it does not answer."""
    lab_host = _require(lab, host)
    tls = Path(lab_host.dir, "rancher-var", lab.distro, "server", "tls", "etcd")
    context = ssl.create_default_context(cafile=str(tls / "server-ca.crt"))
    context.load_cert_chain(tls / "server-client.crt", tls / "server-client.key")
    conn = http.client.HTTPSConnection(lab_host.address, hostfs.ETCD_CLIENT_PORT,
                                       timeout=timeout, context=context)
    try:
        if body is None:
            conn.request("GET", path)
        else:
            conn.request("POST", path, body=json.dumps(body),
                         headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read().decode()
    except http.client.HTTPException as exc:
        raise OSError(str(exc)) from None
    finally:
        conn.close()
    try:
        return json.loads(data)
    except ValueError:
        return data


def status(lab: Lab, host: str) -> dict[str, Any]:
    answer: dict[str, Any] = call(lab, host, "/v3/maintenance/status", {})
    return answer


def has_leader(lab: Lab, host: str) -> bool | None:
    """The member's own etcd_server_has_leader gauge (None: it does not answer)."""
    try:
        text = call(lab, host, "/metrics", timeout=1.0)
    except OSError:
        return None
    for line in str(text).splitlines():
        if line.startswith("etcd_server_has_leader "):
            return float(line.split()[1]) == 1.0
    return None


def _require(lab: Lab, host: str) -> LabHost:
    from .lab import LabError

    lab_host = lab.host(host)
    if not lab.etcd or lab_host.role != "controller" or not lab_host.spec.engine_installed:
        raise LabError(f"{host} runs no etcd member (a lab has one per controller, "
                       "unless it was started with --no-etcd)")
    return lab_host
