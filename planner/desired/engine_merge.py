"""Whether what cargoship's config drop-in sets is what the engine will use, once it merges
config.yaml and every config.yaml.d file the way rke2 and k3s do (facts/engine_config.py).

A later file that sets the same scalar key, or a list key without the `+` suffix, wins over
the drop-in: the plan would say "audit policy on" while the engine ran without it.
"""

from __future__ import annotations

import posixpath
from typing import Any

from ..facts.engine_config import merge_layers


def overridden(layers: list[tuple[str, dict[str, Any]]], dropin_path: str,
               dropin: dict[str, Any]) -> list[str]:
    """One message per setting of the drop-in that the merged config does not keep."""
    def order(item: tuple[str, dict[str, Any]]) -> tuple[int, str]:
        # config.yaml first, then config.yaml.d/*.yaml in name order.
        return ("/config.yaml.d/" in item[0], posixpath.basename(item[0]))

    ordered = sorted([*[(p, d) for p, d in layers if p != dropin_path], (dropin_path, dropin)],
                     key=order)
    merged = merge_layers([d for _, d in ordered])
    position = next(i for i, (p, _) in enumerate(ordered) if p == dropin_path)
    later = ordered[position + 1:]
    messages = []
    for key, value in dropin.items():
        base = key.removesuffix("+")
        final = merged.get(base)
        if key.endswith("+"):
            kept = all(item in (final if isinstance(final, list) else [final])
                       for item in value)
        else:
            kept = final == value
        if not kept:
            by = [p for p, d in later if base in d]
            messages.append(f"{', '.join(by) or 'a later file'} sets {base} after cargoship's "
                            f"{posixpath.basename(dropin_path)}, so the engine would not use "
                            f"what cargoship writes there (use {base}+ in that file to "
                            "append, or remove the setting)")
    return messages

