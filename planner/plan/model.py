"""The plan as plain data: what was read, what would change, what could not be assessed.

Kept apart from its file format (codec.py), like Terraform keeps its plan struct apart from
planfile: the model knows nothing about JSON, the codec nothing about phases.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .hostref import HostRef as HostRef  # where it lives, as every reader imports it

# major.minor: a reader refuses any other major, and reads every minor of its own. 2.0:
# typed actions, hosts as objects. 2.1: each phase counts its hosts (ok, failed, skipped).
FORMAT_VERSION = "2.1"

# The reason of an unassessed item for a host that dropped out of the run before the phase
# (unreachable, or a failed preflight), then why: shown as "not assessed on HOST (why)".
NOT_READ = "host not read: "

Outcome = Literal["ran", "no changes", "planned", "reported", "unassessed", "skipped"]


@dataclass(frozen=True)
class Note:
    host: HostRef | None  # None: about the cluster, or the local machine
    text: str


@dataclass(frozen=True)
class Notice:
    """A warning or a problem: where, in which phase, what."""

    host: HostRef | None
    phase: str | None
    text: str

    def __str__(self) -> str:
        where = f"{self.host}: " if self.host is not None else ""
        phase = f"{self.phase}: " if self.phase else ""
        return f"{where}{phase}{self.text}"


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

    @property
    def ref(self) -> HostRef:
        return HostRef(self.name, self.address, self.port)


@dataclass(frozen=True)
class PhaseOutcome:
    number: int
    title: str
    dry_run: str
    outcome: Outcome
    findings: tuple[Note, ...] = ()


# Phases that read no host (they report what they would do): no host counts.
REPORTED = "reported, not run"


@dataclass(frozen=True)
class HostCounts:
    """How a phase fared host by host: ok (read there without a problem there), failed
    (a problem there), skipped (dropped out in an earlier phase, so never read here)."""

    ok: int
    failed: tuple[HostRef, ...] = ()
    skipped: tuple[HostRef, ...] = ()

    def as_counts(self) -> dict[str, int]:
        return {"ok": self.ok, "failed": len(self.failed), "skipped": len(self.skipped)}


@dataclass(frozen=True)
class KeyChange:
    """One key of a YAML file that a change adds, removes or changes, like an attribute in
    Terraform's plan. Values are JSON text with secrets masked exactly as in the diff."""

    op: Literal["add", "remove", "change"]
    path: str  # e.g. mirrors."docker.io".endpoint[0]
    before: str | None = None  # None for "add"
    after: str | None = None  # None for "remove"


@dataclass(frozen=True)
class Change:
    host: HostRef | None  # None: the local machine (kubeconfig)
    phase: str  # the title of the phase that planned it: for people only
    action: str  # one of planner.plan.actions.ACTIONS; decides what the executor does
    target: str
    before: str | None  # content digest, None when absent
    after: str | None
    diff: str  # a unified diff for people, secrets masked
    # Whether apply cordons and drains the node first: as the action says, unless
    # options.drain.when says never for this file (the schema holds them to it).
    drain: bool = False
    restart: bool = False
    node: str | None = None  # label-node: the node
    label: str | None = None  # label-node: the label key
    context: str | None = None  # merge-kubeconfig: the context name
    # What changed by key path, for every YAML file change (empty for labels and recovery,
    # for a deletion whose content was not read, and in plans made before it existed).
    key_changes: tuple[KeyChange, ...] = ()


@dataclass(frozen=True)
class Unassessed:
    phase: str  # for people
    host: HostRef | None
    reason: str
    # What would be planned once it can be assessed: an action the executor must be able
    # to assess and carry out itself after the rollout, or it refuses the plan. None:
    # the phase declared nothing that could.
    action: str | None


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
    warnings: tuple[Notice, ...] = ()
    problems: tuple[Notice, ...] = ()
    salt: str = ""  # hex; salts the digests of host content and secrets in this plan
    seconds: float = 0.0  # how long planning took
    applyable: bool = True
    complete: bool = True
    format_version: str = FORMAT_VERSION
    # Outside the digest, like the digest itself: signing never changes what was signed.
    signatures: tuple[Signature, ...] = ()

    def host_counts(self, phase: PhaseOutcome) -> HostCounts | None:
        """Derived, like the summary: None for a phase that says nothing host by host (it
        reads no host, or reports only on the cluster)."""
        if phase.dry_run == REPORTED:
            return None
        failed = {n.host for n in self.problems if n.host is not None and n.phase == phase.title}
        seen = {n.host for n in phase.findings if n.host is not None}
        if not seen and not failed:
            return None
        earlier = {p.title for p in self.phases if p.number < phase.number}
        dropped = {n.host for n in self.problems if n.host is not None and n.phase in earlier}
        skipped = ({h.ref for h in self.hosts} - seen - failed) & dropped
        order = {h.ref: i for i, h in enumerate(self.hosts)}
        return HostCounts(len(seen - failed),
                          tuple(sorted(failed, key=lambda h: order.get(h, len(order)))),
                          tuple(sorted(skipped, key=lambda h: order.get(h, len(order)))))

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
