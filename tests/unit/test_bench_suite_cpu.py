"""The suite's CPU table (tests/bench/suite_cpu.py): files and tests by CPU, largest first."""

from __future__ import annotations

import json
from pathlib import Path

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
