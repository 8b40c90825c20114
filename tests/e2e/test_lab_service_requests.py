"""The lab tells a start someone asked for from the supervisor's own respawn, as systemd's
journal does ("Starting rke2-server.service" vs "Scheduled restart job"): what tests of a
rollback need to see that cargoship restarted the engine, not runit after a crash."""

from __future__ import annotations

import time

from tests.lab import HostSpec, Lab
from tests.waiting import poller

poll = poller(timeout=30)


def ready_since(lab: Lab, host: str, since: float) -> int:
    return sum(name == "ready" and when >= since for when, name in lab.events(host))


def test_requests_and_respawns_are_told_apart(lab_factory) -> None:
    lab = lab_factory([HostSpec("wrk-1", "worker")], distro="k3s")
    service = f"/etc/service/{lab.engine_service('wrk-1')}"
    lab.record_service_requests("wrk-1")
    since = time.time()
    # Asked: a stop, then a start (what a restart script does), from the service's own
    # directory as a relative path too; a look at its status is no request.
    lab.exec("wrk-1", f"sv down {service} && sv status {service}")
    poll(lambda: lab.events("wrk-1")[-1][1] == "stopped")
    lab.exec("wrk-1", f"cd {service} && sv -w 30 up .")
    poll(lambda: ready_since(lab, "wrk-1", since) == 1)
    # Not asked: the engine dies and runit starts it again by itself.
    lab.exec("wrk-1", f"kill -9 $(cat {service}/supervise/pid)")
    poll(lambda: ready_since(lab, "wrk-1", since) == 2)
    # Asked in one request: runit's restart (TERM, then up).
    lab.exec("wrk-1", f"sv -w 25 restart {service}")
    poll(lambda: ready_since(lab, "wrk-1", since) == 3)
    assert [command for _, command in lab.service_requests("wrk-1", since)] == [
        "down", "up", "restart"]
    assert [who for _, who in lab.engine_starts("wrk-1", since)] == [
        "asked", "supervisor", "asked"]
    # Another service's requests are not the engine's.
    lab.exec("wrk-1", "sv restart /etc/service/sshd")
    assert len(lab.service_requests("wrk-1", since)) == 3
