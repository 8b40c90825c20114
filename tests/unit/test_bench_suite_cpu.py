"""The suite's CPU table (tests/bench/suite_cpu.py): files and tests by CPU, largest first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.suite_cpu import report


def test_files_and_tests_are_ranked_by_cpu(tmp_path: Path) -> None:
    log = tmp_path / "cpu.jsonl"
    rows = [{"test": "tests/e2e/test_a.py::one", "cpu": 1.0, "wall": 5.0},
            {"test": "tests/e2e/test_a.py::two", "cpu": 2.0, "wall": 5.0},
            {"test": "tests/e2e/test_b.py::big", "cpu": 6.0, "wall": 9.0}]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = report(log, most=5)
    assert lines[0].startswith("3 tests, 9 CPU-s")
    files = [line.split()[-1] for line in lines[2:4]]
    assert files == ["tests/e2e/test_b.py", "tests/e2e/test_a.py"]
    assert "66.7%" in lines[2] and "33.3%" in lines[3]
    tests = [line.split()[-1] for line in lines if "::" in line]
    assert tests == ["tests/e2e/test_b.py::big", "tests/e2e/test_a.py::two",
                     "tests/e2e/test_a.py::one"]


def test_the_table_says_how_much_went_to_starting_and_stopping_labs(tmp_path: Path) -> None:
    log = tmp_path / "cpu.jsonl"
    rows = [{"test": "tests/e2e/test_a.py::one", "cpu": 4.0, "lab": 1.5, "wall": 5.0},
            {"test": "tests/unit/test_b.py::two", "cpu": 1.0, "wall": 1.0}]  # older line
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert report(log, most=5)[0] == ("2 tests, 5 CPU-s in all (the workers' process "
                                      "trees), 2 of them inside Lab.up and Lab.down")


def test_lab_cycles_are_counted_around_up_and_down_only(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    from tests.bench import suite_cpu
    from tests.lab.lab import Lab

    clock = [0.0]

    class Group:
        def seconds(self) -> float:
            return clock[0]

    def up(cls: type, cost: float) -> str:
        clock[0] += cost
        if cost > 5:  # fails to start: taken down inside up, counted once
            Lab.down(object())  # type: ignore[arg-type]
        return "lab"

    def down(self: object) -> None:
        clock[0] += 0.25
        raise RuntimeError("a host would not stop")  # counted all the same

    monkeypatch.setattr(Lab, "up", classmethod(up))
    monkeypatch.setattr(Lab, "down", down)
    spent = [0.0]
    suite_cpu._count_lab_cycles(Group(), spent)  # type: ignore[arg-type]
    assert Lab.up(2.0) == "lab"  # type: ignore[call-arg]
    clock[0] += 10.0  # the test's own work
    with pytest.raises(RuntimeError):
        Lab.down(object())  # type: ignore[arg-type]
    assert spent == [2.25]
    with pytest.raises(RuntimeError):
        Lab.up(6.0)  # type: ignore[call-arg]
    assert spent == [2.25 + 6.25]
