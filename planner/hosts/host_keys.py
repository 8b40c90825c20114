"""Host keys: fingerprints, the run's parsed known_hosts files, and the policies for a key
known_hosts does not have.

Host keys are checked strictly against known_hosts unless the user opts in to accepting
keys of hosts never seen before; a key that *changed* is refused either way.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import paramiko

log = logging.getLogger("cargoship.planner")

DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts")


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH-style SHA256 fingerprint, as `ssh-keygen -lf` prints it."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def known_hosts_name(address: str, port: int) -> str:
    return address if port == 22 else f"[{address}]:{port}"


class UnknownHostKey(Exception):
    def __init__(self, key: paramiko.PKey) -> None:
        self.key = key


class StrictPolicy(paramiko.MissingHostKeyPolicy):
    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        raise UnknownHostKey(key)


class AcceptNewPolicy(paramiko.MissingHostKeyPolicy):
    """Like OpenSSH's StrictHostKeyChecking=accept-new: record unseen keys, never changed ones."""

    def __init__(self, path: Path, lock: threading.Lock) -> None:
        self.path = path
        self.lock = lock

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        self.record(hostname, key)

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
    """One parsed known_hosts file, with its entries indexed by plain host name: paramiko's
    lookup walks every entry, once per host, so a fleet sharing one file paid for it
    quadratically. Hashed entries (|1|...) can only be tried one by one, as paramiko does."""

    def __init__(self, keys: paramiko.HostKeys) -> None:
        # paramiko's own test for a hashed name (the salt and HMAC of each entry).
        self._matches = cast(Any, keys)._hostname_matches
        self._by_name: dict[str, list[tuple[int, Any]]] = {}
        self._hashed: list[tuple[int, Any]] = []
        for position, entry in enumerate(getattr(keys, "_entries", [])):
            for name in entry.hostnames:
                if name.startswith("|1|"):
                    self._hashed.append((position, entry))
                else:
                    self._by_name.setdefault(name, []).append((position, entry))

    def lookup(self, name: str) -> dict[str, paramiko.PKey] | None:
        """paramiko's HostKeys.lookup, as a dict: each key type's first entry, in file
        order (None when the host has no entry)."""
        found = dict(self._by_name.get(name, ()))
        if not name.startswith("|1|"):
            for position, entry in self._hashed:
                if position not in found and self._matches(name, entry):
                    found[position] = entry
        if not found:
            return None
        keys: dict[str, paramiko.PKey] = {}
        for position in sorted(found):
            key = found[position].key
            if key is not None:
                keys.setdefault(key.get_name(), key)
        return keys


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
        stat = path.stat()
        version = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            cached = self._parsed.get(str(path))
            if cached is None or cached[0] != version:
                cached = (version, _Index(paramiko.HostKeys(str(path))))
                self._parsed[str(path)] = cached
        return cached[1].lookup(name)

    def trust(self, client: paramiko.SSHClient, path: Path, host: str, port: int) -> None:
        """Give the client the keys known_hosts has for this host: exactly what
        SSHClient.load_host_keys would have let it check (hashed entries included)."""
        name = known_hosts_name(host, port)
        for key_type, key in (self.lookup(path, name) or {}).items():
            client.get_host_keys().add(name, key_type, key)


def pin(client: paramiko.SSHClient, name: str, pinned: str) -> bool:
    """Keep only the known_hosts key with the pinned fingerprint for this host; paramiko then
    refuses any other key at key exchange, before authentication."""
    keys = client.get_host_keys()
    kept = [(kind, key) for kind, key in (keys.lookup(name) or {}).items()
            if fingerprint(key) == pinned]
    if not kept:
        return False
    keys.clear()
    for kind, key in kept:
        keys.add(name, kind, key)
    return True
