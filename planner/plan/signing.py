"""Signed plans: SSH signatures (`ssh-keygen -Y sign`, namespace cargoship-plan) over the
plan's canonical digest.

Signatures live in the plan file beside the digest and, like it, outside what the digest
covers, so signing never changes what was signed. Anyone can check that a signature is
well formed and whose key made it; only an allowed-signers file (OpenSSH's format) says
whose signature counts for an apply.
"""

from __future__ import annotations

import datetime
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import CargoshipError
from .detached import read_small_file
from .model import Signature

_MAX_PUBLIC_KEY = 64 << 10  # an OpenSSH public key line is under 1 KiB (RSA 16384: ~3 KiB)

NAMESPACE = "cargoship-plan"
_FINGERPRINT = re.compile(r"key (SHA256:[A-Za-z0-9+/]+)")


class SigningError(CargoshipError):
    pass


@dataclass(frozen=True)
class Check:
    signature: Signature
    valid: bool  # well formed and over this plan's digest
    principal: str | None = None  # whom an allowed-signers file says it is
    reason: str = ""


def _ssh_keygen(args: list[str], message: str, signature: str | None = None) -> \
        subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="cargoship-sig.") as tmp:
        if signature is not None:
            (Path(tmp) / "sig").write_text(signature)
            args = [a if a != "{sig}" else str(Path(tmp) / "sig") for a in args]
        try:
            return subprocess.run(["ssh-keygen", *args], input=message, capture_output=True,
                                  text=True, timeout=30)
        except FileNotFoundError:
            raise SigningError("ssh-keygen is not installed (OpenSSH client)") from None
        except subprocess.TimeoutExpired:
            # It reads the files it is given (keys, allowed signers): one of them may be a
            # FIFO or a device that never ends.
            raise SigningError(f"ssh-keygen {' '.join(args[:2])} did not finish within "
                               "30 s") from None


def sign(digest: str, key: Path) -> Signature:
    if not key.exists():
        raise SigningError(f"{key}: no such key file")
    public = key.with_name(key.name + ".pub")
    comment = ""
    if public.exists():
        # Read first, capped, and a regular file only (a link to one is fine: keys are
        # often linked): ssh-keygen reads the .pub beside the key too, and a .pub that is
        # /dev/zero or a FIFO held it until its timeout.
        words = read_small_file(public, _MAX_PUBLIC_KEY, SigningError, "a public key file",
                                follow=True).decode("utf-8", "replace").split(None, 2)
        comment = words[2].strip() if len(words) > 2 else ""
    result = _ssh_keygen(["-Y", "sign", "-q", "-f", str(key), "-n", NAMESPACE], digest)
    if result.returncode != 0 or "BEGIN SSH SIGNATURE" not in result.stdout:
        reason = result.stderr.strip().splitlines()[-1:] or ["no signature produced"]
        raise SigningError(f"cannot sign with {key}: {reason[0]}")
    check = _ssh_keygen(["-Y", "check-novalidate", "-n", NAMESPACE, "-s", "{sig}"], digest,
                        result.stdout)
    match = _FINGERPRINT.search(check.stdout + check.stderr)
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return Signature(match.group(1) if match else "unknown", comment, now, result.stdout)


def check_signature(digest: str, signature: Signature) -> Check:
    """Well formed and made over this digest, by the key it says (no trust decision)."""
    result = _ssh_keygen(["-Y", "check-novalidate", "-n", NAMESPACE, "-s", "{sig}"], digest,
                         signature.signature)
    match = _FINGERPRINT.search(result.stdout)
    if result.returncode != 0 or not match or match.group(1) != signature.key:
        return Check(signature, False, reason="does not verify against this plan's digest")
    return Check(signature, True)


def verify(digest: str, signature: Signature, allowed: Path,
           revoked: Path | None = None) -> Check:
    """Whether an allowed-signers file vouches for this signature (and no revocation)."""
    basic = check_signature(digest, signature)
    if not basic.valid:
        return basic
    found = _ssh_keygen(["-Y", "find-principals", "-s", "{sig}", "-f", str(allowed)], "",
                        signature.signature)
    principals = found.stdout.split() if found.returncode == 0 else []
    if not principals:
        return Check(signature, False, reason=f"key {signature.key} is not in {allowed}")
    for principal in principals:
        args = ["-Y", "verify", "-f", str(allowed), "-I", principal, "-n", NAMESPACE,
                "-s", "{sig}"]
        if revoked is not None:
            args += ["-r", str(revoked)]
        if _ssh_keygen(args, digest, signature.signature).returncode == 0:
            return Check(signature, True, principal)
    why = "revoked" if revoked is not None else "not accepted"
    return Check(signature, False, principals[0], f"key {signature.key} is {why}")
