"""Counting signers: how many people, not signatures, vouched for a plan.

Both gates count the same way: `apply --require-signed-by` against --min-signatures
(cargoship/apply_command.py), and the controllers' signature policy (executor/policy.py). A
principal counts once however many of their signatures a plan carries (two keys of one
person, or one signature embedded and detached too); a signature counts only when it
verified against the allowed signers, so a revoked key or a signature over another digest
never does, even when the allowed-signers file names its principal.

Pure: the signatures were verified already (signing.verify); this only decides.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .signing import Check


@dataclass(frozen=True)
class Count:
    principals: tuple[str, ...]  # distinct, sorted: whom the valid signatures name
    minimum: int
    rejected: tuple[Check, ...]  # the signatures that did not verify, for the message

    @property
    def met(self) -> bool:
        return len(self.principals) >= self.minimum


def count_signers(checks: Iterable[Check], minimum: int) -> Count:
    """The distinct principals of the valid `checks`, held against `minimum` (at least
    one: a gate that asks for none would let any plan through)."""
    if minimum < 1:
        raise ValueError(f"a signature count needs a minimum of at least 1, not {minimum}")
    checks = tuple(checks)
    principals = {c.principal for c in checks if c.valid and c.principal}
    return Count(tuple(sorted(principals)), minimum,
                 tuple(c for c in checks if not c.valid))
