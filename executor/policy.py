"""The cluster's signature policy: how many signatures, from whom, every apply needs.

`apply --require-signed-by` is a flag, and whoever runs apply chooses the flags; a pull
request can change the workflow that runs it, and `engine-config-sync --confirm` applies
with no review at all. So the policy lives where neither can reach: on the controllers
(POLICY, root's, 0600 in a 0700 directory, checked before it is believed), written by
`cargoship signature-policy`. Once a controller holds one, every apply of the cluster
enforces it, flags or not: the plan must carry at least `min_signatures` signatures that
verify against the policy's allowed signers (embedded, or detached beside the plan or in
--signatures). Replacing a policy needs the old policy's signers to approve the new one:
SSH signatures (namespace POLICY_NAMESPACE) over the new policy's digest.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from planner.errors import CargoshipError
from planner.hosts.batch import quote
from planner.plan.model import Signature
from planner.plan.signers import count_signers
from planner.plan.signing import verify
from planner.safetext import octal

from .remote import HostWriter

POLICY_DIR = "/etc/cargoship"
POLICY = f"{POLICY_DIR}/signature-policy.json"
POLICY_NAMESPACE = "cargoship-policy"
MAX_BYTES = 65536


class PolicyError(CargoshipError):
    """A policy that cannot be believed, or one a plan does not meet."""


@dataclass(frozen=True)
class Policy:
    min_signatures: int
    allowed_signers: str  # OpenSSH allowed-signers lines
    set_at: str = ""
    set_by: str = ""

    def body(self) -> dict[str, object]:
        return {"version": 1, "min_signatures": self.min_signatures,
                "allowed_signers": self.allowed_signers}

    @property
    def digest(self) -> str:
        """What approvals of this policy sign: its rules, not who set it when."""
        canon = json.dumps(self.body(), sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(canon.encode()).hexdigest()

    def to_json(self) -> str:
        return json.dumps({**self.body(), "set_at": self.set_at, "set_by": self.set_by},
                          indent=2, sort_keys=True) + "\n"

    def principals(self) -> list[str]:
        return sorted({line.split()[0] for line in self.allowed_signers.splitlines()
                       if line.strip() and not line.lstrip().startswith("#")})


def parse(text: str, where: str) -> Policy:
    try:
        data = json.loads(text)
        policy = Policy(int(data["min_signatures"]), str(data["allowed_signers"]),
                        str(data.get("set_at", "")), str(data.get("set_by", "")))
    except (ValueError, KeyError, TypeError):
        raise PolicyError(f"{where}: {POLICY} is not a signature policy cargoship wrote; "
                          "refusing to apply anything until it is fixed") from None
    if policy.min_signatures < 1 or not policy.principals():
        raise PolicyError(f"{where}: {POLICY} names no signers or asks for fewer than one "
                          "signature; refusing")
    return policy


# Believed only when root alone could have written it: the directory and the file root's,
# neither group- nor world-writable, the file a regular one (not a link).
READ_SCRIPT = (
    f"if [ ! -e {quote(POLICY)} ] && [ ! -L {quote(POLICY)} ]; then echo none; exit 0; fi; "
    f"echo \"dir $(stat -c '%u %a %F' {quote(POLICY_DIR)})\"; "
    f"echo \"file $(stat -c '%u %a %F' {quote(POLICY)})\"; "
    f"head -c {MAX_BYTES + 1} {quote(POLICY)}")


def _trusted(kind: str, line: str, where: str) -> None:
    parts = line.split(maxsplit=2)
    wanted = "directory" if kind == "dir" else "regular file"
    path = POLICY_DIR if kind == "dir" else POLICY
    mode = octal(parts[1]) if len(parts) == 3 else None
    if len(parts) != 3 or parts[0] != "0" or parts[2] != wanted or mode is None or \
            mode & 0o022:
        raise PolicyError(f"{where}: {path} is not root's alone ({line or 'unreadable'}): "
                          "refusing to believe the signature policy, and so to apply")


def read(writer: HostWriter) -> Policy | None:
    output = writer.run_root(READ_SCRIPT).stdout.decode("utf-8", "replace")
    if output.strip() == "none":
        return None
    head, _, rest = output.partition("\n")
    second, _, body = rest.partition("\n")
    _trusted("dir", head.removeprefix("dir "), writer.label)
    _trusted("file", second.removeprefix("file "), writer.label)
    if len(body.encode()) > MAX_BYTES:
        raise PolicyError(f"{writer.label}: {POLICY} is larger than {MAX_BYTES} bytes")
    return parse(body, writer.label)


def agreed(found: dict[str, Policy | None]) -> Policy | None:
    """The cluster's policy: every controller must hold the same one (or none at all)."""
    kinds = {(p.digest if p else None) for p in found.values()}
    if len(kinds) > 1:
        shown = "; ".join(f"{host}: {p.digest[:19] if p else 'none'}"
                          for host, p in sorted(found.items()))
        raise PolicyError(f"the controllers hold different signature policies ({shown}); "
                          "refusing to apply until they agree (cargoship signature-policy)")
    return next(iter(found.values()), None)


def enforce(policy: Policy, digest: str, signatures: Sequence[Signature]) -> list[str]:
    """The principals of the valid signatures; PolicyError when fewer than the policy's."""
    with tempfile.TemporaryDirectory(prefix="cargoship-policy.") as tmp:
        allowed = Path(tmp) / "allowed_signers"
        allowed.write_text(policy.allowed_signers)
        count = count_signers([verify(digest, s, allowed) for s in signatures],
                              policy.min_signatures)
    if not count.met:
        raise PolicyError(
            f"the cluster's signature policy (on its controllers) needs "
            f"{policy.min_signatures} signature(s) from {', '.join(policy.principals())}; "
            f"this plan has {len(count.principals)}"
            + (f" ({', '.join(count.principals)})" if count.principals else "")
            + ": have it signed (cargoship sign PLAN --key KEY [--detached]); nothing was "
              "changed")
    return list(count.principals)


def approve(current: Policy, new: Policy, approvals: Sequence[Path]) -> list[str]:
    """The principals of `current` who signed `new`'s digest; PolicyError when fewer
    than `current` asks for a plan."""
    principals: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="cargoship-policy.") as tmp:
        allowed = Path(tmp) / "allowed_signers"
        allowed.write_text(current.allowed_signers)
        for path in approvals:
            found = _policy_signer(allowed, new.digest, path)
            if found:
                principals.add(found)
    if len(principals) < current.min_signatures:
        raise PolicyError(
            f"replacing the signature policy needs {current.min_signatures} approval(s) from "
            f"{', '.join(current.principals())} over {new.digest} (ssh-keygen -Y sign -n "
            f"{POLICY_NAMESPACE}); found {len(principals)}; nothing was changed")
    return sorted(principals)


def _policy_signer(allowed: Path, digest: str, signature: Path) -> str | None:
    try:
        armored = signature.read_bytes()[:MAX_BYTES]
    except OSError:
        return None
    with tempfile.NamedTemporaryFile("wb", suffix=".sig") as sig:
        sig.write(armored)
        sig.flush()
        found = subprocess.run(["ssh-keygen", "-Y", "find-principals", "-s", sig.name,
                                "-f", str(allowed)], capture_output=True, text=True,
                               check=False, timeout=30)
        for principal in found.stdout.split() if found.returncode == 0 else []:
            ok = subprocess.run(["ssh-keygen", "-Y", "verify", "-f", str(allowed), "-I",
                                 principal, "-n", POLICY_NAMESPACE, "-s", sig.name],
                                input=digest, capture_output=True, text=True, check=False,
                                timeout=30)
            if ok.returncode == 0:
                return principal
    return None


def write_script() -> str:
    """Write the policy (on stdin) root's alone, atomically."""
    d, p = quote(POLICY_DIR), quote(POLICY)
    return (f"set -eu; umask 077; mkdir -p {d}; chown 0:0 {d}; chmod 0700 {d}; "
            f"[ ! -L {p} ] || {{ echo '{POLICY} is a link: refusing' >&2; exit 1; }}; "
            f"cat > {p}.tmp; chown 0:0 {p}.tmp; chmod 0600 {p}.tmp; mv -f {p}.tmp {p}")


def stamped(policy: Policy, by: str) -> Policy:
    at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return Policy(policy.min_signatures, policy.allowed_signers, at, by)
