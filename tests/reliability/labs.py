"""A small lab shared by the tests of one module (starting one costs seconds)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.e2e.cli import edit_config
from tests.lab import HostSpec, Lab


def start_small_lab(base: Path, *extra: HostSpec) -> Lab:
    """One controller and one worker (plus `extra` hosts that are not in cluster.yaml),
    with timeouts short enough for tests."""
    if os.geteuid() != 0:
        pytest.skip("the lab needs root (namespaces)")
    lab = Lab.up(base, [HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker"), *extra])

    def edit(data: dict) -> None:  # type: ignore[type-arg]
        data["spec"]["hosts"] = data["spec"]["hosts"][:2]
        data["spec"]["options"].update(readyTimeoutSeconds=20, drain={"timeoutSeconds": 10})

    edit_config(lab.dir / "cluster.yaml", edit)
    return lab


def shared_lab(factory: pytest.TempPathFactory, *extra: HostSpec) -> Iterator[Lab]:
    lab = start_small_lab(factory.mktemp("lab"), *extra)
    try:
        yield lab
    finally:
        lab.down()


def config_copy(lab: Lab, path: Path) -> Path:
    """The lab's cluster.yaml copied to `path`, for a test to edit without touching the
    one other tests of the module use."""
    path.write_text((lab.dir / "cluster.yaml").read_text())
    return path


def load(path: Path) -> dict:  # type: ignore[type-arg]
    return yaml.safe_load(path.read_text())  # type: ignore[no-any-return]
