"""Host keys: fingerprints, the run's parsed known_hosts files, and the policies for a key
known_hosts does not have.

Host keys are checked strictly against known_hosts unless the user opts in to accepting
keys of hosts never seen before; a key that *changed* is refused either way, and so is a
key known_hosts marks @revoked.
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
from typing import Any

import paramiko

log = logging.getLogger("cargoship.planner")

DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts")


def fingerprint(key: paramiko.PKey) -> str:
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

    def record(self, hostname: str, key: paramiko.PKey) -> None:
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        with self.lock:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "a") as fh:
                fh.write(line)
        log.warning("accepted new host key %s for %s into %s", fingerprint(key), hostname,
                    self.path)


class _Index:
    """One known_hosts file, indexed by plain host name, each line's key parsed only when
    its host is looked up. paramiko's HostKeys parses every key on load, checks each line
    against all the lines before it, and walks every entry per lookup: quadratic in a
    fleet sharing one file. Hashed names (|1|...) can only be tried one by one, as
    paramiko does. Lines are read as paramiko reads them (HostKeyEntry.from_line), so a
    lookup gives what HostKeys.lookup gives."""

    def __init__(self, text: str) -> None:
        self._lines: list[tuple[str, int]] = []
        self._by_name: dict[str, list[int]] = {}
        self._hashed: list[tuple[int, list[str]]] = []
        self._parsed: dict[int, Any] = {}
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

    def lookup(self, name: str) -> dict[str, paramiko.PKey] | None:
        """paramiko's HostKeys.lookup, as a dict: each key type's first entry, in file
        order (None when the host has no entry)."""
        found = set(self._by_name.get(name, ()))
        if not name.startswith("|1|"):
            found.update(p for p, names in self._hashed if _hashed_match(name, names))
        keys: dict[str, paramiko.PKey] = {}
        for position in sorted(found):
            entry = self._entry(position)
            if entry is not None and entry.key is not None:
                keys.setdefault(entry.key.get_name(), entry.key)
        return keys or None

    def _entry(self, position: int) -> Any:
        with self._lock:
            if position not in self._parsed:
                line, lineno = self._lines[position]
                try:
                    self._parsed[position] = paramiko.hostkeys.HostKeyEntry.from_line(
                        line, lineno)
                except paramiko.SSHException:
                    self._parsed[position] = None  # skipped, as HostKeys.load skips it
            return self._parsed[position]


def _blob(text: str) -> bytes:
    try:
        return base64.b64decode(text.encode(), validate=True)
    except (binascii.Error, ValueError):
        return b""


def _hashed_match(name: str, hashed: list[str]) -> bool:
    for entry in hashed:
        try:
            if hmac.compare_digest(paramiko.HostKeys.hash_host(name, entry), entry):
                return True
        except (ValueError, AssertionError, binascii.Error):
            continue  # a malformed salt matches nothing
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

    def lookup(self, path: Path, name: str) -> dict[str, paramiko.PKey] | None:
        """The keys `path` has for host `name` (as known_hosts spells it), by type."""
        return self._index(path).lookup(name)

    def revoked(self, path: Path, key: paramiko.PKey) -> bool:
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
