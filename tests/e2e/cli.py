"""Run the real `cargoship` command the way a user does, and hold it to the one-line rule."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml


def cargoship_argv() -> list[str]:
    script = Path(sys.executable).with_name("cargoship")
    if script.exists():
        return [str(script)]
    found = shutil.which("cargoship")
    return [found] if found else [sys.executable, "-m", "cargoship"]


def cargoship(*args: str | Path, env: dict[str, str] | None = None,
              timeout: float = 180) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [*cargoship_argv(), *map(str, args)], capture_output=True, text=True, timeout=timeout,
        env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL,
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert "Traceback" not in result.stdout, result.stdout
    return result


def edit_config(path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    """Load a cluster.yaml, let `edit(data)` change it, write it back; returns the path."""
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
