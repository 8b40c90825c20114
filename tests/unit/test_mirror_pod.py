"""rke2's API server judged by its mirror pod (executor/mirror_pod.py), and the Waiter that
asks it (executor/readiness.py): the old static pod still serving is not back; a rising
restart count is a crash loop. The lab test tests/e2e/test_rke2_apiserver_pod.py runs the
same code against the lab's mirror pods."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import pytest

from executor.mirror_pod import MirrorView, crash_restarts, fresh, parse_mirror
from executor.readiness import CrashLoopError, Waiter, parse_probe
from tests.unit.test_readiness import BEFORE, RUN, STOP, T0, Host, later, node

OLD, NEW = "a" * 32, "b" * 32


def pod(config_hash: str, started: datetime.datetime | None, restarts: int = 0
        ) -> dict[str, Any]:
    state: dict[str, Any] = {"running": {"startedAt": started.strftime(
        "%Y-%m-%dT%H:%M:%SZ")}} if started else {"waiting": {"reason": "CrashLoopBackOff"}}
    return {"metadata": {"name": "kube-apiserver-ctl-1", "annotations": {
        "kubernetes.io/config.hash": config_hash}},
        "status": {"containerStatuses": [{"name": "kube-apiserver", "restartCount": restarts,
                                          "state": state}]}}


def view(*args: Any) -> MirrorView:
    parsed = parse_mirror(pod(*args))
    assert isinstance(parsed, MirrorView)
    return parsed


def test_parse_says_what_is_missing() -> None:
    assert parse_mirror([]) == "not a pod object"
    assert parse_mirror({"metadata": {}}) == "no kubernetes.io/config.hash annotation"
    assert parse_mirror({"metadata": {"annotations": {"kubernetes.io/config.hash": OLD}}}) \
        == "no kube-apiserver container status yet"
    assert view(OLD, None, 3) == MirrorView(OLD, False, None, 3, "CrashLoopBackOff")


def test_fresh_needs_the_manifests_pod_running() -> None:
    before_stop = T0 - datetime.timedelta(seconds=60)
    # The manifest changed: the old pod (old hash) serving is not back, nor a container
    # of the new hash that is not running or started before the stop.
    assert "not the one of the manifest" in fresh(view(OLD, before_stop), NEW, OLD, STOP)
    assert "not running (CrashLoopBackOff)" in fresh(view(NEW, None), NEW, OLD, STOP)
    assert "started before the stop" in fresh(view(NEW, before_stop), NEW, OLD, STOP)
    assert fresh(view(NEW, later(2)), NEW, OLD, STOP) == ""
    # The manifest did not change: the pod that ran on is the right one (a real rke2
    # leaves it running), one restarted is too.
    assert fresh(view(OLD, before_stop), OLD, OLD, STOP) == ""
    assert fresh(view(OLD, later(2)), OLD, OLD, STOP) == ""
    assert fresh("HTTP 503 from 10.0.0.2", OLD, OLD, STOP) == \
        "its mirror pod: HTTP 503 from 10.0.0.2"


def test_restarts_count_from_the_pod_before_the_stop_or_from_zero_in_a_new_pod() -> None:
    assert crash_restarts(view(OLD, later(1), 5), view(OLD, T0, 4)) == 0  # the start's own
    assert crash_restarts(view(OLD, None, 7), view(OLD, T0, 4)) == 2
    assert crash_restarts(view(NEW, None, 2), view(OLD, T0, 4)) == 2
    assert crash_restarts(view(NEW, None, 2), "unreadable") is None  # no baseline
    assert crash_restarts("unreadable", view(OLD, T0, 4)) is None
    # With this start's manifest known, its own pod counts as before.
    assert crash_restarts(view(NEW, None, 2), view(OLD, T0, 4), NEW) == 2
    assert crash_restarts(view(OLD, None, 7), view(OLD, T0, 4), OLD) == 2


def test_a_crash_looping_pod_of_an_older_manifest_is_not_this_starts_crash_loop() -> None:
    # A rollback restores the config and starts the engine: the manifest is OLD again, but
    # until the kubelet replaces it, the mirror pod is still the NEW config's crash-looping
    # pod. Its restarts (before the stop and since) are the config being undone; counted,
    # they failed the rollback ("ROLLBACK FAILED: ... crash-looping") under load.
    assert crash_restarts(view(NEW, None, 5), view(NEW, T0, 2), OLD) is None
    assert crash_restarts(view(NEW, None, 3), view(OLD, T0, 0), OLD) is None


def test_a_rollback_counts_no_restart_of_the_pod_it_undoes() -> None:
    # The rollback's start has not rewritten the manifest yet: the host still shows NEW
    # (the config being undone), and the kubelet restarted NEW's pod since the last read
    # before the stop. Counted against the manifest read, that was "ROLLBACK FAILED: ...
    # its mirror pod counts 3 restart(s)" in CI.
    assert crash_restarts(view(NEW, None, 6), view(NEW, T0, 2), NEW) == 3  # a forward start
    assert crash_restarts(view(NEW, None, 6), view(NEW, T0, 2), NEW, undone=NEW) is None
    # The restored config's own pod still counts.
    assert crash_restarts(view(OLD, None, 2), view(NEW, T0, 2), OLD, undone=NEW) == 2


def waiter(reads: list[Any], before: MirrorView | str, manifest: str = OLD,
           undoing: bool = False) -> Waiter:
    answers: Iterator[Any] = iter(reads)
    w = Waiter(Host([]), "runit", "rke2-server", "ctl-1", True,  # type: ignore[arg-type]
               lambda: (True, "/readyz ok"), lambda: next(answers), undoing=undoing)
    w.probed("before", parse_probe(BEFORE + f"\napiserver-logs 1\napiserver-manifest "
                                            f"{manifest}"))
    w.mirror_before = before
    w.stopped_at = STOP
    return w


def test_the_old_pod_still_serving_keeps_the_waiter_waiting() -> None:
    old = view(OLD, T0 - datetime.timedelta(seconds=60), 1)
    w = waiter([old, view(NEW, later(3))], old)
    w.probed("state", parse_probe(RUN.format(20) + f"\napiserver-manifest {NEW}"))
    w.node_seen(node("True", later(2)))
    assert w.waiting_for().startswith(
        "API server: the kube-apiserver pod serving is not the one of the manifest")
    w._mirror_read_at = float("-inf")  # paced: asked again once due
    assert w.waiting_for() == ""


def test_a_rising_restart_count_is_a_crash_loop() -> None:
    before = view(OLD, T0 - datetime.timedelta(seconds=60), 1)
    w = waiter([view(NEW, None, 2)], before)
    w.probed("state", parse_probe(RUN.format(20) + f"\napiserver-manifest {NEW}"))
    with pytest.raises(CrashLoopError, match=r"kube-apiserver is crash-looping \(its mirror "
                                             r"pod counts 2 restart\(s\)"):
        w.waiting_for()


def test_no_manifest_no_mirror_pod_asked() -> None:  # k3s, or an rke2 without the file
    w = waiter([], "unreadable")
    w.probed("state", parse_probe(RUN.format(20)))
    w.node_seen(node("True", later(2)))
    assert w.waiting_for() == ""  # the empty reader was never asked


def test_a_rollbacks_waiter_waits_out_the_undone_pod_and_still_sees_its_own_loop() -> None:
    undone = view(NEW, None, 2)
    w = waiter([view(NEW, None, 6), view(OLD, None, 2)], undone, manifest=NEW, undoing=True)
    w.probed("state", parse_probe(RUN.format(20) + f"\napiserver-manifest {NEW}"))
    assert w.waiting_for().startswith("node: ")  # NEW's 3 restarts since: not the rollback's
    w._mirror_read_at = float("-inf")
    w.probed("state", parse_probe(RUN.format(20) + f"\napiserver-manifest {OLD}"))
    with pytest.raises(CrashLoopError, match=r"its mirror pod counts 2 restart\(s\)"):
        w.waiting_for()
