"""HelmChartConfig objects the engine's deploy controller would apply from files that are
not cargoship's: two files defining the same HelmChartConfig overwrite each other on every
reconcile, so cargoship reports the other file instead of fighting it.

The directory is walked as deeply as the deploy controller walks it (k3s pkg/deploy/
controller.go lists it with filepath.Walk: every subdirectory, as Rancher's
`manifests/rancher/` is, links not followed). Only regular files are read (`find -type f`
never follows a link), at most MAX_BYTES each,
and only those that mention HelmChartConfig at all; nothing of their content but the kind,
namespace and name of their objects leaves this module.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import yaml

from ..hosts.batch import Fact, FactParseError, Output, quote
from ..safetext import decimal
from ..safeyaml import safe_load_all
from .bounds import check_size

MAX_BYTES = 1024 * 1024
# The whole listing (base64, 4/3 of the files' bytes): a few files of MAX_BYTES. A
# manifests directory of many large files mentioning HelmChartConfig is refused unread:
# its YAML alone would take seconds to parse.
MAX_LISTING = 4 << 20
KIND = "HelmChartConfig"
# The deploy controller puts objects without a namespace into kube-system.
DEFAULT_NAMESPACE = "kube-system"


@dataclass(frozen=True)
class ForeignManifests:
    charts: dict[str, tuple[tuple[str, str], ...]]  # file -> (namespace, name) of each
    unreadable: tuple[str, ...] = ()  # files that mention HelmChartConfig but don't parse

    def defining(self, namespace: str, name: str) -> list[str]:
        return sorted(f for f, objects in self.charts.items() if (namespace, name) in objects)


def foreign_charts_fact(manifests_dir: str, owned_prefix: str) -> Fact[ForeignManifests]:
    d = quote(manifests_dir)
    prefix = quote(owned_prefix)
    command = (
        f"[ -d {d} ] && [ ! -L {d} ] && find {d} -type f "
        r"\( -name '*.yaml' -o -name '*.yml' -o -name '*.json' \) "
        f"! -name {prefix}'*' -print 2>/dev/null | LC_ALL=C sort | "
        "while IFS= read -r f; do "
        f"grep -q {KIND} \"$f\" 2>/dev/null || continue; "
        "s=$(wc -c < \"$f\"); "
        f"echo \"file $s $(head -c {MAX_BYTES} \"$f\" | base64 -w0) $f\"; done; true"
    )
    return Fact("foreign chart configs", command, parse_foreign_charts, MAX_LISTING)


def parse_foreign_charts(out: Output) -> ForeignManifests:
    charts: dict[str, tuple[tuple[str, str], ...]] = {}
    unreadable: list[str] = []
    for line in check_size(out, MAX_LISTING, "the manifest listing").splitlines():
        parts = line.split(" ", 3)
        size = decimal(parts[1]) if len(parts) == 4 else None
        if len(parts) != 4 or parts[0] != "file" or size is None:
            raise FactParseError(f"unexpected manifest line {line[:60]!r}")
        path, encoded = parts[3], parts[2]
        if size > MAX_BYTES:
            unreadable.append(path)
            continue
        try:
            docs = safe_load_all(base64.b64decode(encoded, validate=True).decode("utf-8"))
        except (yaml.YAMLError, ValueError, OverflowError, TypeError):
            # ValueError: not base64 (binascii.Error), not UTF-8, and what PyYAML's own
            # constructors raise on host text (`2001-13-45`, an int of 4301 digits).
            unreadable.append(path)
            continue
        found = []
        for doc in docs:
            if not isinstance(doc, dict) or doc.get("kind") != KIND:
                continue
            raw = doc.get("metadata")
            meta: dict[str, Any] = raw if isinstance(raw, dict) else {}
            found.append((str(meta.get("namespace") or DEFAULT_NAMESPACE),
                          str(meta.get("name") or "")))
        if found:
            charts[path] = tuple(found)
    return ForeignManifests(charts, tuple(unreadable))
