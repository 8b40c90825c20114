"""The plan as plain data: what was read, what would change, what could not be assessed.

Kept apart from its file format (codec.py), like Terraform keeps its plan struct apart from
planfile: the model knows nothing about JSON, the codec nothing about phases.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

FORMAT_VERSION = "1.0"  # major.minor: a reader refuses an unknown major

Outcome = Literal["ran", "no changes", "planned", "reported", "unassessed", "skipped"]


@dataclass(frozen=True)
class Note:
    host: str | None  # None: about the cluster, or the local machine
    text: str


@dataclass(frozen=True)
class HostIdentity:
    name: str
    address: str
    port: int
    role: str
    profile: str | None
    host_key: str | None  # SHA256 fingerprint the plan was made against (None: unreachable)
    os: str | None
    arch: str | None
    engine_version: str | None
    # target -> fingerprint of what the plan read there ("absent" when it did not exist)
    reads: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PhaseOutcome:
    number: int
    title: str
    dry_run: str
    outcome: Outcome
    findings: tuple[Note, ...] = ()


@dataclass(frozen=True)
class Change:
    host: str | None  # None: the local machine (kubeconfig)
    phase: str
    action: str  # "create", "update", "delete", "label", "merge"
    target: str
    before: str | None  # content digest, None when absent
    after: str | None
    diff: str  # a unified diff for people, secrets masked
    drain: bool = False
    restart: bool = False


@dataclass(frozen=True)
class Unassessed:
    phase: str
    host: str | None
    reason: str


@dataclass(frozen=True)
class Signature:
    key: str  # SHA256 fingerprint of the signing key
    comment: str  # the key's comment, for people (not trusted)
    signed_at: str
    signature: str  # armored SSH signature over the plan's digest


@dataclass(frozen=True)
class Plan:
    plan_id: str
    created_at: str
    created_by: str
    cargoship_version: str
    config_digest: str
    cluster: str
    desired: dict[str, Any]  # the desired state, secrets as salted digests
    hosts: tuple[HostIdentity, ...]
    phases: tuple[PhaseOutcome, ...]
    changes: tuple[Change, ...] = ()
    unassessed: tuple[Unassessed, ...] = ()
    warnings: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    salt: str = ""  # hex; salts the digests of host content and secrets in this plan
    seconds: float = 0.0  # how long planning took
    applyable: bool = True
    complete: bool = True
    format_version: str = FORMAT_VERSION
    # Outside the digest, like the digest itself: signing never changes what was signed.
    signatures: tuple[Signature, ...] = ()

    @property
    def summary(self) -> dict[str, int]:
        """Derived, never stored separately from what it summarises."""
        return {
            "hosts": len(self.hosts),
            "changes": len(self.changes),
            "hosts_changed": len({c.host for c in self.changes}),
            "restarts": len({c.host for c in self.changes if c.restart}),
            "unassessed": len(self.unassessed),
            "warnings": len(self.warnings),
            "problems": len(self.problems),
        }
