"""The digest rule of README, recomputed without the codec, holds for real plan files."""

from __future__ import annotations

import json
from dataclasses import replace

from planner.plan import codec
from planner.plan.model import Signature
from tests.digest_rule import recompute
from tests.unit.test_plan_codec import sample_plan


def test_the_documented_rule_gives_the_digest_the_file_carries() -> None:
    # Non-ASCII text and a signature: neither may change how the digest is computed.
    plan = replace(sample_plan(), created_by="zoë@laptop", signatures=(
        Signature("SHA256:" + "k" * 43, "alice", "2026-12-01T03:00:00Z",
        "-----BEGIN SSH SIGNATURE-----\nAAAA\n-----END SSH SIGNATURE-----\n"),))
    data = json.loads(codec.dumps(plan))
    assert data["digest"] == recompute(data)
    data["signatures"] = []  # outside the digest: signing changes nothing that was signed
    assert data["digest"] == recompute(data)
    data["created_by"] = "mallory"
    assert data["digest"] != recompute(data)
