"""Reliability tests record what they exercised, so `python -m tests.reliability.report` can
print one table of fault and input classes.

A test names its class with `@pytest.mark.reliability("class name")` and adds to its case
count and lost-data count with the `tally` fixture. When CARGOSHIP_RELIABILITY_OUT names a
file, each finished test appends one JSON line to it: class, test, whether it passed (a test
asserts consistency, so passing is ending consistent), cases and anything lost.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

OUT_ENV = "CARGOSHIP_RELIABILITY_OUT"


@dataclass
class Tally:
    cases: int = 0
    lost: int = 0

    def case(self, n: int = 1) -> None:
        self.cases += n

    def add_lost(self, n: int) -> None:
        self.lost += n


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "reliability(name): the fault or input class a test "
                                       "belongs to in the reliability report")


@pytest.fixture
def tally(request: pytest.FixtureRequest) -> Iterator[Tally]:
    t = Tally()
    request.node.stash[_TALLY] = t
    yield t


_TALLY = pytest.StashKey[Tally]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    report = yield
    out = os.environ.get(OUT_ENV)
    marker = item.get_closest_marker("reliability")
    if not out or marker is None:
        return report
    # One line per test: its call phase, or the setup phase when setup failed or skipped.
    if report.when == "call" or (report.when == "setup" and not report.passed):
        t = item.stash.get(_TALLY, Tally())
        line = {"class": marker.args[0], "test": item.nodeid, "outcome": report.outcome,
                "cases": t.cases or 1, "lost": t.lost}
        with open(out, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")
    return report
