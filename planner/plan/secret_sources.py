"""Where each secret of a plan comes from: what apply will read, never a value.

A plan carries every secret as its source and a salted digest (planner.plan.desired);
apply reads each source again. So the source is a choice apply obeys, and a reviewer must
see it: a diff can only say `"***" -> "*** (changed)"`, which reads the same for a rotated
password and for cargoship's own SSH key sent to a registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .desired import ALLOW, is_digested, secret_slots


@dataclass(frozen=True)
class SecretSource:
    keys: tuple[str, ...]  # inside engineConfig: ("registries", "configs", R, "auth", NAME)
    kind: str  # "env", "file", "inline", or what an edited plan says (shown as it is)
    name: str  # the variable's name or the file's path ("" inline)
    allow_any_path: bool = False  # its config said allowAnyPath: true

    def __str__(self) -> str:
        if self.kind == "inline":
            return "inline in the config (not carried by the plan)"
        return f"{self.kind} {self.name}"


def secret_sources(desired: dict[str, Any]) -> list[SecretSource]:
    """Every secret of a plan's desired state, in the config's order."""
    found = []
    engine_config = desired.get("engineConfig")
    for parent, key, keys in secret_slots(engine_config if isinstance(engine_config, dict)
                                          else {}):
        value = parent[key]
        if is_digested(value):
            kind, _, name = value["secret"].partition(":")
            found.append(SecretSource(keys, kind, name,
                                      value.get(ALLOW) is True))
    return found
