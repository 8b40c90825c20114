"""Assemble a Plan from what a finished dry run found, already in the plan's own terms
(planner/make.py translates the run's records): the plan's identity, its desired state and
the verdicts (applyable, complete) derived from the findings. Nothing here runs a phase or
reads a host."""

from __future__ import annotations

import datetime
import secrets
from collections.abc import Sequence

from .. import __version__
from ..config.model import ClusterConfig
from .desired import inline_secrets, to_desired
from .model import Change, HostIdentity, Notice, PhaseOutcome, Plan, Unassessed


def build_plan(config: ClusterConfig, salt: bytes, *, created_by: str,
               hosts: Sequence[HostIdentity], phases: Sequence[PhaseOutcome],
               changes: Sequence[Change], unassessed: Sequence[Unassessed],
               warnings: Sequence[Notice], problems: Sequence[Notice],
               seconds: float) -> Plan:
    inline = inline_secrets(config)
    return Plan(
        plan_id=_uuid4_hex(),
        created_at=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
        + "Z",
        created_by=created_by,
        cargoship_version=__version__,
        config_digest=config.digest,
        cluster=config.name,
        desired=to_desired(config, salt),
        hosts=tuple(hosts),
        phases=tuple(phases),
        changes=tuple(changes),
        unassessed=tuple(unassessed),
        warnings=tuple(warnings) + tuple(
            Notice(None, None, f"{path}: an inline secret can't be carried by a plan; use "
                   "fromEnv or fromFile to make this plan applyable") for path in inline),
        problems=tuple(problems),
        salt=salt.hex(),
        seconds=round(seconds, 3),
        applyable=not problems and not inline,
        complete=not problems and not unassessed,
    )


def _uuid4_hex() -> str:
    """A random (version 4) UUID as 32 hex digits, what uuid.uuid4().hex gives, without
    importing uuid: it imports platform, which a plan then pays for on every run."""
    raw = bytearray(secrets.token_bytes(16))
    raw[6] = raw[6] & 0x0F | 0x40  # version 4
    raw[8] = raw[8] & 0x3F | 0x80  # RFC 4122 variant
    return raw.hex()
