"""Detached plan signatures: one small file per signer and plan, which a reviewer commits
to the pull request, so that signing needs no write access to where the plan is kept
(a CI artifact cannot be changed by a person).

A file says which plan it signs (id and digest) and carries the same SSH signature an
embedded one would; what counts is still only whether it verifies against the plan's
digest and an allowed-signers file. Files signing other plans (earlier pull requests)
are ignored.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..errors import CargoshipError
from ..localfiles import atomic_write
from .model import Plan, Signature

SUFFIX = ".cargoship-sig"
FORMAT = "cargoship-signature/1"
_MAX_BYTES = 64 << 10


class DetachedSignatureError(CargoshipError):
    pass


def file_name(plan: Plan, signature: Signature) -> str:
    # One file per plan and key: signing again replaces one's own file, never another's.
    key = re.sub(r"[^A-Za-z0-9]", "", signature.key.removeprefix("SHA256:"))[:16]
    return f"{plan.plan_id}.{key}{SUFFIX}"


def write(plan: Plan, digest: str, signature: Signature, directory: Path) -> Path:
    body = {"format": FORMAT, "plan_id": plan.plan_id, "plan_digest": digest,
            "key": signature.key, "comment": signature.comment,
            "signed_at": signature.signed_at, "signature": signature.signature}
    path = directory / file_name(plan, signature)
    atomic_write(path, (json.dumps(body, indent=2, sort_keys=True) + "\n").encode())
    return path


def read(plan: Plan, digest: str, directory: Path) -> list[Signature]:
    """The signatures in `directory` made for this plan (by id and digest)."""
    if not directory.is_dir():
        raise DetachedSignatureError(f"{directory}: no such signature directory")
    found: list[Signature] = []
    for path in sorted(directory.glob(f"*{SUFFIX}")):
        body = _load(path)
        if body.get("plan_id") != plan.plan_id or body.get("plan_digest") != digest:
            continue
        found.append(Signature(str(body["key"]), str(body.get("comment", "")),
                               str(body.get("signed_at", "")), str(body["signature"])))
    return found


def _load(path: Path) -> dict[str, object]:
    try:
        raw = path.read_bytes()[:_MAX_BYTES + 1]
    except OSError as exc:
        raise DetachedSignatureError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        body = json.loads(raw) if len(raw) <= _MAX_BYTES else None
    except (ValueError, RecursionError):
        body = None
    if not isinstance(body, dict) or body.get("format") != FORMAT or not all(
            isinstance(body.get(k), str) for k in ("plan_id", "plan_digest", "key",
                                                     "signature")):
        raise DetachedSignatureError(f"{path}: not a cargoship signature file ({FORMAT})")
    return body
