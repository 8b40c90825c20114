"""Fresh readiness and crash-loop detection (executor/readiness.py), with a scripted host
and node; the lab tests (tests/e2e/test_rollout_fidelity.py) run the same code for real."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from executor.readiness import CrashLoopError, NotBackError, Waiter, parse_probe, point_at

T0 = datetime.datetime(2026, 12, 1, 12, 0, 0, tzinfo=datetime.UTC)


def node(ready: str, beat: datetime.datetime) -> Any:
    cond = SimpleNamespace(type="Ready", status=ready, last_heartbeat_time=beat)
    return SimpleNamespace(status=SimpleNamespace(conditions=[cond]))


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


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def waiter(probes: list[str], nodes: list[Any], *, controller: bool = False,
           readyz: Any = None, before: str = "state runit run: /etc/service/x: (pid 10) 9s",
           beat: datetime.datetime | None = T0) -> Waiter:
    clock = Clock()
    reads = iter(nodes)
    last: list[Any] = [None]

    def read_node(_: str) -> Any:
        last[0] = next(reads, last[0])
        if isinstance(last[0], Exception):
            raise last[0]
        return last[0]

    w = Waiter(Host(probes), "runit", "rke2-server", "ctl-1", controller,  # type: ignore[arg-type]
               read_node, readyz, clock=clock, sleep=clock.sleep)
    w.before = parse_probe(before + ("\napiserver-logs 1" if controller else ""))
    w.heartbeat = beat
    return w


RUN = "state runit run: /etc/service/x: (pid {}) 1s"


def test_stale_ready_is_not_back_until_a_heartbeat_after_the_restart() -> None:
    # The node reads Ready throughout, but with the old engine's heartbeat for a while.
    w = waiter([RUN.format(20)], [node("True", T0)] * 5 + [node("True", T0 + datetime.
                                                                timedelta(seconds=12))])
    seen: list[str] = []
    w.wait(60, seen.append)
    assert seen == ["waiting: node: ctl-1 has posted no status since the restart"]


def test_the_old_process_is_not_a_restart() -> None:
    w = waiter([RUN.format(10)], [node("True", T0 + datetime.timedelta(seconds=5))])
    with pytest.raises(NotBackError, match="still runs its old process 10"):
        w.wait(3, lambda _: None)


def test_controller_waits_for_its_api_server() -> None:
    answers = iter([(False, "/readyz: HTTP 500 ([-]etcd failed)")] * 3 + [(True, "ok")])
    w = waiter([RUN.format(20) + "\napiserver-logs 2"],
               [node("True", T0 + datetime.timedelta(seconds=3))], controller=True,
               readyz=lambda: next(answers))
    seen: list[str] = []
    w.wait(60, seen.append)
    assert seen == ["waiting: API server: /readyz: HTTP 500 ([-]etcd failed)"]


def test_engine_restarting_on_its_own_is_a_crash_loop_with_its_log() -> None:
    down = "state runit down: /etc/service/x: 0s, normally up, want up"
    w = waiter([RUN.format(20), down, RUN.format(21), down, RUN.format(22)],
               [RuntimeError("connection refused")])
    with pytest.raises(CrashLoopError) as exc:
        w.wait(600, lambda _: None)
    assert "rke2-server is crash-looping" in str(exc.value)
    assert "engine log: level=fatal msg=boom" in str(exc.value)


def test_engine_dying_before_ready_is_a_crash_loop() -> None:
    # runit with a check script: the process runs but never passes it, then dies.
    starting = "state runit starting: run: /etc/service/x: (pid {}) 0s"
    down = "state runit down: /etc/service/x: 0s, normally up"
    w = waiter([starting.format(20), down, starting.format(21), down, starting.format(22)],
               [RuntimeError("connection refused")])
    with pytest.raises(CrashLoopError, match="rke2-server is crash-looping"):
        w.wait(600, lambda _: None)


def test_systemd_restart_counter_and_auto_restart() -> None:
    state = parse_probe("state systemd activating\nshow MainPID=0 NRestarts=7 "
                        "SubState=auto-restart ")
    assert (state.state, state.pid, state.restarts, state.auto_restart) == \
        ("starting", None, 7, True)


def test_api_server_pod_restarting_is_a_crash_loop() -> None:
    probes = [RUN.format(20) + f"\napiserver-logs {n}" for n in (2, 2, 3, 4)]
    w = waiter(probes, [RuntimeError("connection refused")], controller=True,
               readyz=lambda: (False, "/readyz: connection refused"))
    with pytest.raises(CrashLoopError) as exc:
        w.wait(600, lambda _: None)
    assert "kube-apiserver is crash-looping (2 restart(s)" in str(exc.value)
    assert "kube-apiserver log: F audit: bad level" in str(exc.value)


def test_point_at_keeps_scheme_and_port() -> None:
    admin = {"clusters": [{"cluster": {"server": "https://10.0.0.1:6443"}}]}
    assert point_at(admin, "10.0.0.2")["clusters"][0]["cluster"]["server"] == \
        "https://10.0.0.2:6443"
    assert admin["clusters"][0]["cluster"]["server"] == "https://10.0.0.1:6443"


def test_api_server_restarts_of_the_old_config_before_the_start_are_not_counted() -> None:
    # The old config's pod restarted twice more while the engine was stopping (logs 1 -> 3);
    # after the start the new one adds its one log: no crash loop.
    probes = [RUN.format(20) + "\napiserver-logs 3"] + \
        [RUN.format(20) + "\napiserver-logs 4"] * 3
    w = waiter(probes, [node("True", T0 + datetime.timedelta(seconds=3))], controller=True,
               readyz=lambda: (True, "ok"))
    w.note_starting()
    assert w.before is not None and w.before.apiserver_logs == 3
    w.wait(60, lambda _: None)
