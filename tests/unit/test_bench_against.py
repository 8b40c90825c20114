"""The two-tree comparison's arithmetic (tests/bench/against.py): medians per figure, the
ratio to the baseline client, CPU per host beyond start-up, and a plan that failed
stopping the comparison rather than counting."""

from __future__ import annotations

import pytest

from tests.bench.against import Figures, table
from tests.bench.measure import Run


def plan(wall: float, cpu: float, startup: float, code: int = 0) -> Run:
    stdout = (f"  start-up to the phases loaded: 0.300 s wall, {startup:.3f} s CPU (from "
              "process start)\n")
    return Run(("cargoship",), code, wall, cpu, 50.0, stdout, "")


def baseline(wall: float) -> Run:
    return Run(("baseline",), 0, wall, 0.1, 20.0, "", "")


def test_medians_ratio_and_cpu_per_host() -> None:
    figures = Figures()
    for wall, cpu, base, hosts in ((4.0, 0.70, 3.0, 7.0), (5.0, 0.90, 3.5, 8.0),
                                   (4.5, 0.80, 3.2, 7.5)):
        figures.add(plan(wall, cpu, 0.20), hosts, baseline(base))
    row = figures.row(100)
    assert row["wall"] == 4.5 and row["cpu"] == 0.80 and row["hosts"] == 7.5
    assert row["ratio"] == pytest.approx(4.5 / 3.2)
    assert row["per_host_ms"] == pytest.approx((0.80 - 0.20) / 100 * 1000)
    lines = table({(100, "a"): row, (100, "b"): row}, ("a", "b"))
    assert len(lines) == 3 and "1.41x" in lines[1] and "6.0" in lines[1]


def test_a_failed_plan_stops_the_comparison() -> None:
    with pytest.raises(RuntimeError, match="exit 1"):
        Figures().add(plan(1.0, 0.5, 0.2, code=1), 1.0, baseline(1.0))
    with pytest.raises(RuntimeError, match="a plan failed"):
        Figures().add(Run(("cargoship",), 0, 1.0, 0.5, 50.0, "no stats", ""), 1.0,
                      baseline(1.0))
