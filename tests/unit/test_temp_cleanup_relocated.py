"""A killed run's temp files are removed where its writes went: also where the host's
engine config moved cargoship's files (data-dir, private-registry, a relocated config
file), not only in the default directories. The real script, run by sh against
directories in a temporary tree (the default ones do not exist on this machine)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from executor.cleanup import temp_cleanup_script
from planner.facts.engine_config import Locations


def test_temps_in_relocated_directories_are_removed(tmp_path: Path) -> None:
    if Path("/etc/rancher").exists():
        pytest.skip("this machine has an /etc/rancher the script would clean too")
    dropins, registries, manifests = (tmp_path / "cfg.d", tmp_path / "reg",
                                      tmp_path / "data" / "server" / "manifests")
    temps, kept = [], []
    for d in (dropins, registries, manifests):
        d.mkdir(parents=True)
        temps.append(d / ".cargoship.a1B2c3")
        kept += [d / ".cargoship.toolong7", d / "registries.yaml"]
    for f in temps + kept:
        f.write_text("x")
    script = temp_cleanup_script("rke2", Locations(str(dropins),
                                                   str(registries / "registries.yaml"),
                                                   str(manifests)))
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "3"
    assert not any(f.exists() for f in temps)
    assert all(f.exists() for f in kept)  # only names our writers make
