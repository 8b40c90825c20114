"""Host keys: fingerprints, the run's parsed known_hosts files, and the policy for a key
known_hosts does not have.

Host keys are checked strictly against known_hosts unless the user opts in to accepting
keys of hosts never seen before; a key that *changed* is refused either way. A key is
compared as OpenSSH compares it: as the blob the host sends (known_hosts holds it in
base64), so no key class is needed to read, compare or fingerprint one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("cargoship.planner")

DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts")
# The key types a known_hosts line may hold (paramiko's, whose reading this keeps): a
# line of any other type, or whose key does not say that type, is skipped.
_TYPES = frozenset({"ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
                    "ecdsa-sha2-nistp521", "ssh-rsa", "ssh-dss"})


@dataclass(frozen=True)
class HostKey:
    """A public host key as it goes on the wire: its type's name, then its numbers."""

    blob: bytes

    @property
    def name(self) -> str:
        """The type the blob names ("" if it names none)."""
        size = int.from_bytes(self.blob[:4], "big")
        return self.blob[4:4 + size].decode("ascii", "replace") \
            if 0 < size <= len(self.blob) - 4 else ""

    @property
    def fingerprint(self) -> str:
        """OpenSSH-style SHA256 fingerprint, as `ssh-keygen -lf` prints it."""
        return "SHA256:" + base64.b64encode(hashlib.sha256(self.blob).digest()).decode() \
            .rstrip("=")


def known_hosts_name(address: str, port: int) -> str:
    return address if port == 22 else f"[{address}]:{port}"


def accept_new(path: Path, lock: threading.Lock, hostname: str, key: HostKey) -> None:
    """Like OpenSSH's StrictHostKeyChecking=accept-new: record an unseen key (never a
    changed one: the caller's rule)."""
    with lock:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a") as fh:
            fh.write(f"{hostname} {key.name} {base64.b64encode(key.blob).decode()}\n")
    log.warning("accepted new host key %s for %s into %s", key.fingerprint, hostname, path)


class _Index:
    """One known_hosts file, indexed by plain host name (a fleet sharing one file made a
    walk over every line per host quadratic). Hashed names (|1|salt|hmac) can only be
    tried one by one. A line whose key is not one of _TYPES, or not its type, is skipped."""

    def __init__(self, text: str) -> None:
        self._keys: list[HostKey] = []
        self._by_name: dict[str, list[int]] = {}
        self._hashed: list[tuple[int, list[str]]] = []
        for raw in text.splitlines():
            fields = re.split(" |\t", raw.strip())
            if len(fields) < 3 or fields[0].startswith("#") or \
                    (key := _key(fields[1], fields[2])) is None:
                continue
            self._keys.append(key)
            names = fields[0].split(",")
            if hashed := [n for n in names if n.startswith("|1|")]:
                self._hashed.append((len(self._keys) - 1, hashed))
            for name in set(names) - set(hashed):
                self._by_name.setdefault(name, []).append(len(self._keys) - 1)

    def lookup(self, name: str) -> dict[str, HostKey] | None:
        """Each key type's first entry for `name`, in file order (None when it has none)."""
        found = set(self._by_name.get(name, ()))
        if not name.startswith("|1|"):
            found.update(p for p, names in self._hashed if _hashed_match(name, names))
        keys: dict[str, HostKey] = {}
        for position in sorted(found):
            keys.setdefault(self._keys[position].name, self._keys[position])
        return keys or None


def _key(kind: str, text: str) -> HostKey | None:
    try:
        key = HostKey(base64.b64decode(text))
    except (binascii.Error, ValueError):
        return None
    rsa = key.name == "ssh-rsa" and kind in ("rsa-sha2-256", "rsa-sha2-512")
    return key if key.name in _TYPES and (kind == key.name or rsa) else None


def _hashed_match(name: str, hashed: list[str]) -> bool:
    """Whether `name` is one of the |1|salt|hmac-sha1 names OpenSSH's HashKnownHosts writes."""
    for entry in hashed:
        try:
            _, _, salt_text, digest = entry.split("|", 3)
            salt = base64.b64decode(salt_text)
            if len(salt) == 20 and hmac.compare_digest(
                    hmac.new(salt, name.encode(), hashlib.sha1).digest(),
                    base64.b64decode(digest)):
                return True
        except (ValueError, binascii.Error):
            continue  # a malformed entry matches nothing
    return False


@dataclass
class KnownHostsFiles:
    """The run's known_hosts files, each read once per version of it, not once per
    connection (with hundreds of hosts sharing one file, that was most of a plan's CPU).
    A file that changes (accept-new appends to it) is read again."""

    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _parsed: dict[str, tuple[tuple[int, int], _Index]] = \
        field(default_factory=dict, repr=False)

    def lookup(self, path: Path, name: str) -> dict[str, HostKey] | None:
        """The keys `path` has for host `name` (as known_hosts spells it), by type."""
        stat = path.stat()
        version = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            cached = self._parsed.get(str(path))
            if cached is None or cached[0] != version:
                cached = (version, _Index(path.read_text(errors="replace")))
                self._parsed[str(path)] = cached
        return cached[1].lookup(name)
