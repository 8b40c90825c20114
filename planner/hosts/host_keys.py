"""Host keys: fingerprints, the run's parsed known_hosts files, and the policies for a key
known_hosts does not have.

Host keys are checked strictly against known_hosts unless the user opts in to accepting
keys of hosts never seen before; a key that *changed* is refused either way, and so is a
key known_hosts marks @revoked.

A key is kept as the blob SSH sends and known_hosts holds in base64, and two keys are the
same key when their blobs are equal: what paramiko's key classes compare too, without a
key library to import (paramiko and cryptography were a third of a plan's start-up).
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


# The key types known_hosts lines are read for (paramiko's: other types' lines are
# skipped, as it skips them), each with the fields its blob holds after the type's name:
# "s" a string, "m" an mpint (RFC 4253 6.6, RFC 5656 3.1, RFC 8709 4).
_FIELDS = {"ssh-ed25519": "s", "ecdsa-sha2-nistp256": "ss", "ecdsa-sha2-nistp384": "ss",
           "ecdsa-sha2-nistp521": "ss", "ssh-rsa": "mm", "ssh-dss": "mmmm"}
# Names a known_hosts line may give an RSA key (paramiko's RSAKey takes them): the
# signature algorithms' names; the key itself is always "ssh-rsa".
_ALIASES = {"rsa-sha2-256": "ssh-rsa", "rsa-sha2-512": "ssh-rsa"}
_ED25519_BYTES = 32
# Each key has one blob: a point only uncompressed, an mpint without a needless leading
# zero. A key sent in another of its encodings is refused, not compared: @revoked is a
# list of blobs, and a revoked key re-encoded must not pass it (paramiko compared keys
# re-encoded by itself, which canonicalised them).
_ECDSA_POINT_BYTES = {"nistp256": 65, "nistp384": 97, "nistp521": 133}
_SHA1_BYTES = 20  # HashKnownHosts' salt and hash: SHA-1's size (OpenSSH's format, not ours)


@dataclass(frozen=True)
class HostKey:
    """A public host key as SSH sends it: its wire blob, which begins with its type."""

    blob: bytes
    kind: str

    @classmethod
    def from_blob(cls, blob: bytes, kind: str | None = None) -> HostKey | None:
        """The key, or None when the blob is no key of a type read here (or, with `kind`,
        not of that type): as paramiko's key classes refuse it."""
        fields = _strings(blob)
        if not fields:
            return None
        try:
            name = fields[0].decode("ascii")
        except UnicodeDecodeError:
            return None
        shape = _FIELDS.get(name)
        if shape is None or (kind is not None and _ALIASES.get(kind, kind) != name) \
                or len(fields) != len(shape) + 1:
            return None
        if name == "ssh-ed25519" and len(fields[1]) != _ED25519_BYTES:
            return None
        if name.startswith("ecdsa-"):
            curve = name.rsplit("-", 1)[1]
            point = fields[2]
            if fields[1] != curve.encode() or point[:1] != b"\x04" \
                    or len(point) != _ECDSA_POINT_BYTES[curve]:
                return None
        numbers = [f for what, f in zip(shape, fields[1:], strict=True) if what == "m"]
        if not all(_canonical_mpint(n) for n in numbers):
            return None
        return cls(blob, name)

    def get_name(self) -> str:
        return self.kind

    def asbytes(self) -> bytes:
        return self.blob

    def get_base64(self) -> str:
        return base64.b64encode(self.blob).decode()


def _canonical_mpint(value: bytes) -> bool:
    """RFC 4251 5: a positive key number, in the fewest bytes (a leading zero byte only
    where the next one's top bit is set)."""
    if not value or value[0] & 0x80:
        return False  # zero, or negative: no key's
    return value[0] != 0 or (len(value) > 1 and bool(value[1] & 0x80))


def _strings(blob: bytes) -> list[bytes]:
    """The length-prefixed fields of an SSH wire blob; [] when it does not split exactly."""
    fields, at = [], 0
    while at < len(blob):
        if at + 4 > len(blob):
            return []
        size = int.from_bytes(blob[at:at + 4], "big")
        at += 4
        if at + size > len(blob):
            return []
        fields.append(blob[at:at + size])
        at += size
    return fields


def fingerprint(key: HostKey) -> str:
    """OpenSSH-style SHA256 fingerprint, as `ssh-keygen -lf` prints it."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def known_hosts_name(address: str, port: int) -> str:
    return address if port == 22 else f"[{address}]:{port}"


class AcceptNewPolicy:
    """Like OpenSSH's StrictHostKeyChecking=accept-new: record unseen keys, never changed ones."""

    def __init__(self, path: Path, lock: threading.Lock) -> None:
        self.path = path
        self.lock = lock

    def record(self, hostname: str, key: HostKey) -> None:
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        with self.lock:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "a") as fh:
                fh.write(line)
        log.warning("accepted new host key %s for %s into %s", fingerprint(key), hostname,
                    self.path)


class _Index:
    """One known_hosts file, indexed by plain host name, each line's key read only when
    its host is looked up. paramiko's HostKeys parses every key on load, checks each line
    against all the lines before it, and walks every entry per lookup: quadratic in a
    fleet sharing one file. Hashed names (|1|...) can only be tried one by one, as
    paramiko does. Lines are read as paramiko reads them (HostKeyEntry.from_line: names,
    type, base64 key; a line whose key cannot be read is skipped), so a lookup gives what
    HostKeys.lookup gives (tests/unit/test_known_hosts.py holds the two side by side)."""

    def __init__(self, text: str) -> None:
        self._lines: list[tuple[str, int]] = []
        self._by_name: dict[str, list[int]] = {}
        self._hashed: list[tuple[int, list[str]]] = []
        self._parsed: dict[int, HostKey | None] = {}
        self._lock = threading.Lock()
        self.revoked: set[bytes] = set()  # key blobs on @revoked lines
        for lineno, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            fields = re.split(" |\t", line)
            if fields[0] == "@revoked":
                # Never accepted, for any host: OpenSSH refuses it for the hosts its pattern
                # matches (sshd(8) SSH_KNOWN_HOSTS FILE FORMAT); a revoked key is one someone
                # else may hold, so here it is refused whatever the pattern says.
                blob = _blob(fields[3] if len(fields) > 3 else "")
                if blob:
                    self.revoked.add(blob)
                continue
            if fields[0].startswith("@"):
                continue  # @cert-authority: certificates are not used here
            if len(fields) < 3:
                continue
            position = len(self._lines)
            self._lines.append((line, lineno))
            names = fields[0].split(",")
            hashed = [n for n in names if n.startswith("|1|")]
            if hashed:
                self._hashed.append((position, hashed))
            for name in names:
                if not name.startswith("|1|"):
                    self._by_name.setdefault(name, []).append(position)

    def lookup(self, name: str) -> dict[str, HostKey] | None:
        """paramiko's HostKeys.lookup, as a dict: each key type's first entry, in file
        order (None when the host has no entry)."""
        found = set(self._by_name.get(name, ()))
        if not name.startswith("|1|"):
            found.update(p for p, names in self._hashed if _hashed_match(name, names))
        keys: dict[str, HostKey] = {}
        for position in sorted(found):
            key = self._key(position)
            if key is not None:
                keys.setdefault(key.kind, key)
        return keys or None

    def _key(self, position: int) -> HostKey | None:
        with self._lock:
            if position not in self._parsed:
                line, _ = self._lines[position]
                # As from_line: split on each space or tab; names, type, base64 (decoded
                # leniently, as decodebytes does: other characters are left out).
                _, kind, text = re.split(" |\t", line)[:3]
                try:
                    blob = base64.decodebytes(text.encode("ascii", "replace"))
                except (binascii.Error, ValueError):
                    blob = b""
                self._parsed[position] = HostKey.from_blob(blob, kind)
            return self._parsed[position]


def _blob(text: str) -> bytes:
    try:
        return base64.b64decode(text.encode(), validate=True)
    except (binascii.Error, ValueError):
        return b""


def _hashed_match(name: str, hashed: list[str]) -> bool:
    """Whether `name` is one of these |1|salt|hash names (OpenSSH's HashKnownHosts:
    HMAC-SHA1 of the name, keyed with the salt)."""
    for entry in hashed:
        _, _, salt, digest = [*entry.split("|"), "", "", "", ""][:4]
        salt_bytes, digest_bytes = _blob(salt), _blob(digest)
        if len(salt_bytes) != _SHA1_BYTES or not digest_bytes:
            continue  # a malformed salt matches nothing
        mine = hmac.new(salt_bytes, name.encode(), hashlib.sha1).digest()
        if hmac.compare_digest(mine, digest_bytes):
            return True
    return False


@dataclass
class KnownHostsFiles:
    """The run's known_hosts files, each parsed once per version of it, not once per
    connection: with hundreds of hosts sharing one file, parsing it for each host was most
    of a plan's CPU time (quadratic in the fleet size) and contended on paramiko's logger
    lock. A file that changes (accept-new appends to it) is read again."""

    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _parsed: dict[str, tuple[tuple[int, int], _Index]] = \
        field(default_factory=dict, repr=False)

    def lookup(self, path: Path, name: str) -> dict[str, HostKey] | None:
        """The keys `path` has for host `name` (as known_hosts spells it), by type."""
        return self._index(path).lookup(name)

    def revoked(self, path: Path, key: HostKey) -> bool:
        """Whether `path` marks `key` @revoked (for any host)."""
        return key.asbytes() in self._index(path).revoked

    def _index(self, path: Path) -> _Index:
        stat = path.stat()
        version = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            cached = self._parsed.get(str(path))
            if cached is None or cached[0] != version:
                cached = (version, _Index(path.read_text(errors="replace")))
                self._parsed[str(path)] = cached
        return cached[1]
