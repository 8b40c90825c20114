"""Every value that reaches a remote command is quoted (planner/hosts/batch.py quote):
run through a real POSIX shell, a hostile value comes out as the same bytes and runs
nothing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from planner.hosts.batch import quote


@pytest.mark.parametrize("value", [
    "plain", "two words", "$(touch {m})", "`touch {m}`", "x; touch {m}", "x && touch {m}",
    "'; touch {m}; '", '"; touch {m}; "', "a\nb\ttab", "*", "-n", "", "$HOME ~ {m}|cat",
])
def test_a_quoted_value_is_one_argument_and_never_code(value: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    value = value.format(m=marker)
    out = subprocess.run(["sh", "-c", f"printf '%s|' {quote(value)}"], capture_output=True,
                         text=True, check=True, cwd=tmp_path).stdout
    assert out == value + "|"
    assert not marker.exists()
