"""The `cargoship` command exits with main()'s code and its objects frozen, so the
interpreter's exit does not walk them all for a cycle collection (0.04-0.06 s of CPU per
command, measured in tests/bench/FINDINGS.md, seventh pass)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """\
import gc, sys
import cargoship.cli as cli
cli.main = lambda: 3
code = cli.run()
print(code, gc.get_freeze_count() > 1000)
"""


def test_the_command_freezes_its_objects_before_exiting_with_mains_code() -> None:
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                            cwd=ROOT, check=True)
    assert result.stdout.split() == ["3", "True"]


def test_the_installed_command_and_python_m_both_go_through_run() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["cargoship"] == "cargoship.cli:run"
    assert "raise SystemExit(run())" in (ROOT / "cargoship" / "__main__.py").read_text()
