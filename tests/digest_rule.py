"""A plan's digest recomputed from the rule README states, written apart from
planner/plan/codec.py on purpose: if the two ever disagree, the documented rule is wrong
or the code is."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def recompute(plan: dict[str, Any]) -> str:
    body = {k: v for k, v in plan.items() if k not in ("digest", "signatures")}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
