"""JSON Schemas shipped with cargoship: the cluster config and (later) the plan file.

They are package data so that a non-editable install finds them.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

CLUSTER_SCHEMA = "cluster.schema.json"


@cache
def load(name: str) -> dict[str, Any]:
    """Return a parsed schema by file name (cached: schemas never change at run time)."""
    text = resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema
