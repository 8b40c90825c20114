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


SHIPPED = ("cluster.schema.json", "plan.schema.json", "apply-record.schema.json",
           "apply-output.schema.json", "history-output.schema.json",
           "validate-output.schema.json")


def validator(name: str) -> Any:
    """A Draft 2020-12 validator for a shipped schema, with the others resolvable (they
    refer to each other's $defs, e.g. plan.schema.json#/$defs/hostRef)."""
    import jsonschema
    from referencing import Registry, Resource

    registry: Registry[Any] = Registry().with_resources(
        (load(n)["$id"], Resource.from_contents(load(n))) for n in SHIPPED)
    return jsonschema.Draft202012Validator(
        load(name), registry=registry,
        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
