"""Trust chain: an approved plan can't be replayed over a newer one. End to end through
`cargoship plan` and `apply` on lab hosts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cli import cargoship
from tests.lab import Lab
from tests.reliability.labs import shared_lab

REGISTRIES = "/etc/rancher/rke2/registries.yaml"
DRIFTED = "mirrors: {}\n"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    yield from shared_lab(tmp_path_factory)


def plan(lab: Lab, out: Path) -> str:
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    return str(json.loads(out.read_text())["plan_id"])


@pytest.mark.reliability("trust: no replay of old plans")
def test_a_plan_made_before_another_was_applied_is_refused_even_if_hosts_look_the_same(  # type: ignore[no-untyped-def]
        lab: Lab, tmp_path: Path, tally) -> None:
    tally.case()
    lab.exec("wrk-1", f"printf '{DRIFTED}' > {REGISTRIES}")
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    plan(lab, old)
    new_id = plan(lab, new)
    applied = cargoship("apply", new, "--confirm", timeout=300)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    # Someone puts the host back the way it was when the old plan was made: its files look
    # exactly as the old plan saw them, and only the order of applies tells it is stale.
    lab.exec("wrk-1", f"printf '{DRIFTED}' > {REGISTRIES}")
    replayed = cargoship("apply", old, "--confirm", timeout=300)
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert f"another plan ({new_id}) was applied here after this plan was made" in \
        replayed.stderr
    assert len(replayed.stderr.strip().splitlines()) == 1, replayed.stderr
    assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == DRIFTED  # nothing changed
    # A plan made now is the way forward.
    fresh = tmp_path / "fresh.json"
    plan(lab, fresh)
    assert cargoship("apply", fresh, "--confirm", timeout=300).returncode == 0
