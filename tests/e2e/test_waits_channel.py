"""The shorter waits of cargoship's own tests reach no user by chance (executor/waits.py):
outside a test, `cargoship apply` refuses the variable before it reads the plan."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.e2e.cli import cargoship_argv


def test_the_test_waits_are_refused_outside_a_test(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    env["CARGOSHIP_TEST_WAITS"] = '{"silence": 1}'
    result = subprocess.run([*cargoship_argv(), "apply", str(tmp_path / "plan.json"),
                             "--confirm"], capture_output=True, text=True, env=env,
                            timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 1
    assert result.stderr == ("error: CARGOSHIP_TEST_WAITS is for cargoship's own tests "
                             "(it shortens waits): unset it\n"), result.stderr
    assert result.stdout == ""
