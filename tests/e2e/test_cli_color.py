"""Colour on a terminal only: off for pipes, NO_COLOR and --no-color."""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import replace
from pathlib import Path

from planner.plan import codec
from planner.plan.model import PhaseOutcome
from tests.e2e.cli import cargoship, cargoship_argv
from tests.unit.test_plan_codec import sample_plan


def on_a_terminal(*args: str, env: dict[str, str] | None = None) -> str:
    command = " ".join(shlex.quote(a) for a in [*cargoship_argv(), *args])
    result = subprocess.run(["script", "-qec", command, "/dev/null"], capture_output=True,
                            text=True, timeout=60, env={**os.environ, **(env or {})},
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout
    return result.stdout


def test_colour_only_where_a_person_looks(tmp_path: Path) -> None:
    plan_file = tmp_path / "plan.json"
    base = sample_plan()  # its diff: -mirrors: {} +configs: ...
    change = base.changes[0]
    codec.write(replace(base, changes=(change,), phases=(PhaseOutcome(
        7, change.phase, "reported, not run", "planned"),)), plan_file)
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    coloured = on_a_terminal("show", str(plan_file), env=env)
    assert "\x1b[32m          +configs:\x1b[0m" in coloured, coloured
    assert "\x1b[31m          -mirrors: {}\x1b[0m" in coloured
    assert "\x1b[" not in on_a_terminal("show", str(plan_file), env={**env, "NO_COLOR": "1"})
    assert "\x1b[" not in on_a_terminal("--no-color", "show", str(plan_file), env=env)
    piped = cargoship("show", plan_file)
    assert piped.returncode == 0 and "\x1b[" not in piped.stdout


def test_markdown_split_through_the_command(tmp_path: Path) -> None:
    from tests.unit.test_markdown_split import big_plan

    plan_file = tmp_path / "big.json"
    codec.write(big_plan(60, 40), plan_file)
    whole = cargoship("show", plan_file, "--markdown", "--diff")
    assert len(whole.stdout) > 65_000
    parts_dir = tmp_path / "parts"
    result = cargoship("show", plan_file, "--markdown", "--diff", "--split-dir", parts_dir)
    assert result.returncode == 0
    parts = sorted(parts_dir.glob("plan-*.md"))
    assert [str(p) for p in parts] == sorted(result.stdout.split())
    assert len(parts) >= 3
    assert all(len(p.read_text()) < 65_000 for p in parts)
    assert "Signatures: none" in parts[-1].read_text()
