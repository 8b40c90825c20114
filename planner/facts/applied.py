"""Which plans were applied to a host, as its apply records say: the order a plan is
judged by. A plan remembers what this was when it was made; apply refuses it when another
plan was applied to any of its hosts since (even one that left the files looking the same),
so an approved but superseded plan can't be replayed over a newer one.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from ..host_paths import RECORD_DIR
from ..hosts.batch import Fact, FactParseError, Output, quote
from .bounds import check_size

TARGET = f"records:{RECORD_DIR}"  # the name of this read in a plan's fingerprints
# Anchored, one fixed-width class: no backtracking whatever the name.
_PLAN_ID = re.compile(r"^[0-9a-f]{32}$")
_MAX_RECORDS = 100_000
# The listing of _MAX_RECORDS records ("<32 hex>.json\n", 38 bytes each), and room for the
# odd stray file: more is refused unread.
MAX_LISTING = 4 << 20


@dataclass(frozen=True)
class AppliedPlans:
    ids: tuple[str, ...]  # newest first (by the record's time on the host)

    def without(self, plan_id: str | None) -> AppliedPlans:
        return AppliedPlans(tuple(i for i in self.ids if i != plan_id))

    @property
    def fingerprint(self) -> str:
        """Count, newest plan and a digest of the whole set: a person can read the first
        two, the digest catches any other difference."""
        if not self.ids:
            return "none"
        digest = hashlib.sha256(",".join(sorted(self.ids)).encode()).hexdigest()[:16]
        return f"{len(self.ids)} applied, newest {self.ids[0]}, set {digest}"


def newest_of(fingerprint: str | None) -> str | None:
    """The newest plan id a fingerprint names (None for "none" or anything else)."""
    if fingerprint and ", newest " in fingerprint:
        return fingerprint.split(", newest ")[1].split(",")[0]
    return None


def _parse(out: Output) -> AppliedPlans:
    ids = []
    for line in check_size(out, MAX_LISTING, "the apply record listing").splitlines():
        name = line.strip().removesuffix(".json")
        if not name:
            continue
        if not _PLAN_ID.match(name):
            continue  # not a record cargoship wrote (a temp, a stray file): not an apply
        ids.append(name)
    if len(ids) > _MAX_RECORDS:
        raise FactParseError(f"more than {_MAX_RECORDS} apply records")
    return AppliedPlans(tuple(ids))


APPLIED: Fact[AppliedPlans] = Fact(
    "applied plans", f"ls -1t {quote(RECORD_DIR)} 2>/dev/null || true", _parse, MAX_LISTING)
