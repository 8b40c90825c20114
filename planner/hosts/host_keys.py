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
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        with self.lock:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "a") as fh:
                fh.write(line)
        log.warning("accepted new host key %s for %s into %s", fingerprint(key), hostname,
                    self.path)


@dataclass
class KnownHostsFiles:
    """The run's known_hosts files, each parsed once per version of it, not once per
    connection: with hundreds of hosts sharing one file, parsing it for each host was most
    of a plan's CPU time (quadratic in the fleet size) and contended on paramiko's logger
    lock. A file that changes (accept-new appends to it) is read again."""

    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _parsed: dict[str, tuple[tuple[int, int], paramiko.HostKeys]] = \
        field(default_factory=dict, repr=False)

    def parsed(self, path: Path) -> paramiko.HostKeys:
        stat = path.stat()
        version = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            cached = self._parsed.get(str(path))
            if cached is None or cached[0] != version:
                cached = (version, paramiko.HostKeys(str(path)))
                self._parsed[str(path)] = cached
            return cached[1]

    def trust(self, client: paramiko.SSHClient, path: Path, host: str, port: int) -> None:
        """Give the client the keys known_hosts has for this host: exactly what
        SSHClient.load_host_keys would have let it check (hashed entries included)."""
        name = known_hosts_name(host, port)
        entries = self.parsed(path).lookup(name)
        if entries is not None:
            for key_type in entries:
                client.get_host_keys().add(name, key_type, entries[key_type])


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
