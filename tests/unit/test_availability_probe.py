"""The availability probe's judgements (tests/bench/availability.py), on made-up samples:
which failures a leader's hand-over explains, and which leaderless samples make a spell
long enough to mean a lost leader."""

from __future__ import annotations

from typing import Any

from tests.bench.availability import Probe

ETCD_TIMEOUT = "PATCH: HTTP Error 503 (etcd unreachable: TimeoutError: timed out)"


class _Lab:
    def outages(self, host: str, since: float) -> list[tuple[float, float]]:
        return [(100.0, 110.0)] if host == "ctl-1" else []  # ctl-1 restarts 100-110


def probe(**samples: Any) -> Probe:
    made = Probe.__new__(Probe)
    made.lab = _Lab()  # type: ignore[assignment]
    made.failed, made.leaders, made.leaderless = [], [], []
    for name, value in samples.items():
        setattr(made, name, value)
    return made


def test_a_write_a_hand_over_caught_is_explained_and_no_other_failure_is() -> None:
    checked = probe(
        leaders=[(99.0, "ctl-1"), (99.9, "ctl-1"), (100.3, "ctl-2"), (130.0, "ctl-2")],
        failed=[(104.0, "ctl-1", "GET: connection refused"),  # ctl-1's own restart
                (98.5, "ctl-3", ETCD_TIMEOUT),  # in flight when ctl-1 handed over
                (120.0, "ctl-3", ETCD_TIMEOUT),  # no hand-over near it
                (99.5, "ctl-2", "GET: HTTP Error 503 (etcd unreachable)"),  # a read
                (99.5, "ctl-3", "PATCH: connection refused")])  # not etcd's
    assert checked.handovers() == [(99.9, 100.3)]
    assert [f[0] for f in checked.outside(0)] == [98.5, 120.0, 99.5, 99.5]
    assert checked.outside_handovers(0) == [
        (120.0, "ctl-3", ETCD_TIMEOUT),
        (99.5, "ctl-2", "GET: HTTP Error 503 (etcd unreachable)"),
        (99.5, "ctl-3", "PATCH: connection refused")]


def test_leaderless_samples_make_spells_and_only_long_ones_count() -> None:
    lost = [(200.0 + 0.125 * i, "ctl-3") for i in range(11)]  # 1.25 s: a lost leader
    checked = probe(leaderless=[(100.0, "ctl-2"), (300.0, "ctl-3"), *lost])  # two moments
    assert checked.leaderless_spells() == [("ctl-2", 100.0, 100.0), ("ctl-3", 200.0, 201.25),
                                           ("ctl-3", 300.0, 300.0)]
    assert checked.leaderless_longer_than(1.0) == [("ctl-3", 200.0, 201.25)]
