"""Fresh readiness and crash-loop detection (executor/readiness.py), told scripted probes
and node versions; the lab tests (tests/e2e/test_rollout_fidelity.py) run the same code
for real, fed by the restart script and the API's watch."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from executor.readiness import CrashLoopError, Waiter, parse_probe, point_at

T0 = datetime.datetime(2026, 12, 1, 12, 0, 0, tzinfo=datetime.UTC)


class Host:
    """Answers the probe script with the next scripted state line(s)."""

    label = "ctl-1"

    def __init__(self, probes: list[str]) -> None:
        self.probes: Iterator[str] = iter(probes)
        self.last = ""

    def run_root(self, script: str, **_: Any) -> Any:
        if "== engine" in script:  # the log tail
            out = "== engine\nlevel=fatal msg=boom\n== kube-apiserver\nF audit: bad level\n"
        else:
            self.last = next(self.probes, self.last)
            out = self.last
        return SimpleNamespace(stdout=out.encode(), stderr=b"", exit_code=0)


def node(ready: str, beat: datetime.datetime) -> dict[str, Any]:
    stamp = beat.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"metadata": {"name": "ctl-1"}, "status": {"conditions": [
        {"type": "Ready", "status": ready, "lastHeartbeatTime": stamp}]}}


STOP = int(T0.timestamp())  # the host's clock once the engine was down
BEFORE = "state runit run: /etc/service/x: (pid 10) 9s"


def waiter(*, controller: bool = False, readyz: Any = None, before: str = BEFORE) -> Waiter:
    w = Waiter(Host([]), "runit", "rke2-server", "ctl-1", controller,  # type: ignore[arg-type]
               readyz)
    w.probed("before", parse_probe(before + ("\napiserver-logs 1" if controller else "")))
    w.stopped_at = STOP
    return w


RUN = "state runit run: /etc/service/x: (pid {}) 1s"


def later(seconds: int) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def test_stale_ready_is_not_back_until_a_heartbeat_after_the_restart() -> None:
    w = waiter()
    w.probed("state", parse_probe(RUN.format(20)))
    # The node reads Ready throughout, with the old engine's heartbeat for a while: one
    # stamped in the very second the engine was down is not after the restart either.
    for beat in (T0 - datetime.timedelta(seconds=5), T0):
        w.node_seen(node("True", beat))
        assert w.waiting_for() == "node: ctl-1 has posted no status since the restart"
    w.node_seen(node("True", later(1)))
    assert w.waiting_for() == ""


def test_the_old_process_is_not_a_restart() -> None:
    w = waiter()
    w.probed("state", parse_probe(RUN.format(10)))
    w.node_seen(node("True", later(5)))
    assert w.waiting_for() == "engine: rke2-server still runs its old process 10"


def test_nothing_is_back_before_the_engine_and_the_node_are_seen() -> None:
    w = waiter()
    assert w.waiting_for() == "engine: rke2-server is not seen yet"
    w.probed("state", parse_probe(RUN.format(20)))
    assert w.waiting_for() == "node: ctl-1 nothing seen yet"
    w.node_unreadable("connection refused")
    assert w.waiting_for() == "node: ctl-1 unreadable (connection refused)"
    w.node_seen(node("False", later(3)))
    assert w.waiting_for() == "node: ctl-1 not Ready"


def test_controller_waits_for_its_api_server_asked_only_when_due() -> None:
    answers = iter([(False, "/readyz: HTTP 500 ([-]etcd failed)"), (True, "ok")])
    w = waiter(controller=True, readyz=lambda: next(answers))
    w.probed("state", parse_probe(RUN.format(20) + "\napiserver-logs 2"))
    w.node_seen(node("True", later(3)))
    assert w.waiting_for(ask_readyz=False) == "API server: /readyz not asked yet"
    assert w.waiting_for() == "API server: /readyz: HTTP 500 ([-]etcd failed)"
    assert w.waiting_for() == ""


def test_engine_restarting_on_its_own_is_a_crash_loop_with_its_log() -> None:
    down = "state runit down: /etc/service/x: 0s, normally up, want up"
    w = waiter()
    with pytest.raises(CrashLoopError) as exc:
        for probe in [RUN.format(20), down, RUN.format(21), down, RUN.format(22)]:
            w.probed("state", parse_probe(probe))
    assert "rke2-server is crash-looping" in str(exc.value)
    # The headline alone; the log's lines under it, apart.
    assert "engine log" not in str(exc.value)
    assert exc.value.log[0].startswith("engine log") and "  level=fatal msg=boom" in \
        exc.value.log


def test_engine_dying_before_ready_is_a_crash_loop() -> None:
    # runit with a check script: the process runs but never passes it, then dies.
    starting = "state runit starting: run: /etc/service/x: (pid {}) 0s"
    down = "state runit down: /etc/service/x: 0s, normally up"
    w = waiter()
    with pytest.raises(CrashLoopError, match="rke2-server is crash-looping"):
        for probe in [starting.format(20), down, starting.format(21), down,
                      starting.format(22)]:
            w.probed("state", parse_probe(probe))


def test_systemd_restart_counter_and_auto_restart() -> None:
    state = parse_probe("state systemd activating\nshow MainPID=0 NRestarts=7 "
                        "SubState=auto-restart ")
    assert (state.state, state.pid, state.restarts, state.auto_restart) == \
        ("starting", None, 7, True)


def test_api_server_pod_restarting_is_a_crash_loop() -> None:
    w = waiter(controller=True, readyz=lambda: (False, "/readyz: connection refused"))
    with pytest.raises(CrashLoopError) as exc:
        for n in (2, 2, 3, 4):
            w.probed("state", parse_probe(RUN.format(20) + f"\napiserver-logs {n}"))
    assert "kube-apiserver is crash-looping (2 restart(s)" in str(exc.value)
    assert any(line.startswith("kube-apiserver log") for line in exc.value.log)
    assert "  F audit: bad level" in exc.value.log


def test_point_at_keeps_scheme_and_port() -> None:
    admin = {"clusters": [{"cluster": {"server": "https://10.0.0.1:6443"}}]}
    assert point_at(admin, "10.0.0.2")["clusters"][0]["cluster"]["server"] == \
        "https://10.0.0.2:6443"
    assert admin["clusters"][0]["cluster"]["server"] == "https://10.0.0.1:6443"


def test_api_server_restarts_of_the_old_config_before_the_start_are_not_counted() -> None:
    # The old config's pod restarted twice more while the engine was stopping (logs 1 -> 3);
    # after the start the new one adds its one log: no crash loop.
    w = waiter(controller=True, readyz=lambda: (True, "ok"))
    w.probed("starting", parse_probe(RUN.format(10) + "\napiserver-logs 3"))
    assert w.before is not None and w.before.apiserver_logs == 3 and w.before.pid == 10
    for _ in range(3):
        w.probed("state", parse_probe(RUN.format(20) + "\napiserver-logs 4"))
    w.node_seen(node("True", later(3)))
    assert w.waiting_for() == ""


def test_readyz_etcd_check_by_either_name() -> None:
    from executor.readiness import readyz_verdict

    assert readyz_verdict("[+]ping ok\n[+]etcd ok\nreadyz check passed\n") == (
        True, "/readyz ok")
    # Kubernetes 1.26+: the etcd readiness check has its own name.
    assert readyz_verdict("[+]ping ok\n[+]etcd-readiness ok\nreadyz check passed\n")[0]
    assert readyz_verdict("[+]ping ok\n[-]etcd-readiness failed: reason withheld\n") == (
        False, "/readyz: [-]etcd-readiness failed: reason withheld")
    assert readyz_verdict("[+]ping ok\nreadyz check passed\n") == (
        False, "/readyz: no etcd check passed")
