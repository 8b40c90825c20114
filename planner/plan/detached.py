"""Detached plan signatures: one small file per signer and plan, which a reviewer commits
to the pull request, so that signing needs no write access to where the plan is kept
(a CI artifact cannot be changed by a person).

A file says which plan it signs (id and digest) and carries the same SSH signature an
embedded one would; what counts is still only whether it verifies against the plan's
digest and an allowed-signers file. Files signing other plans (earlier pull requests)
are ignored.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
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


def read_small_file(path: Path, limit: int, error: type[CargoshipError], what: str, *,
                    follow: bool = False) -> bytes:
    """At most `limit` bytes of a regular file, read before anything else is done with it.

    Anyone who can commit to a pull request puts files beside a plan: a signature file
    that is a link to /dev/zero was read whole (gigabytes) before being cut to size, a
    FIFO blocked the read for good. So: opened without following a link (unless `follow`)
    and without blocking, refused unless fstat says regular file, and read for at most
    `limit` + 1 bytes, so a larger one is refused rather than cut. Every refusal is one
    line naming the file."""
    name = one_line(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise error(f"{name}: is a symbolic link; {what} must be a regular file") \
                from None
        raise error(f"{name}: cannot read: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise error(f"{name}: not a regular file (a FIFO, a device, a directory?); "
                        f"{what} must be one")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:  # a regular file may still grow while it is read
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise error(f"{name}: cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if size > limit:
        raise error(f"{name}: larger than {limit >> 10} KiB; too large for {what}")
    return b"".join(chunks)


def one_line(path: Path) -> str:
    """A path as an error names it: a file name may hold a newline, an error is one line."""
    return str(path).replace("\n", "\\n").replace("\r", "\\r")


def _load(path: Path) -> dict[str, object]:
    raw = read_small_file(path, _MAX_BYTES, DetachedSignatureError, "a signature file")
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        body = None
    if not isinstance(body, dict) or body.get("format") != FORMAT or not all(
            isinstance(body.get(k), str) for k in ("plan_id", "plan_digest", "key",
                                                     "signature")):
        raise DetachedSignatureError(f"{one_line(path)}: not a cargoship signature file "
                                     f"({FORMAT})")
    return body
