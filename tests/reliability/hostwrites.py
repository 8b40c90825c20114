"""What a run wrote on a lab host, and whether it ran anything it shouldn't have.

A lab host's writes land in places this machine can read: the overlay upper directories
over /etc, /var, /root, /usr, /opt and /srv record every file created or changed there,
/etc/rancher, /var/lib/rancher, /usr/local/bin and /home are bind mounts of the host's own
directories, and /tmp and /run are the host's own tmpfs (listed from inside). A snapshot before and
after a run, compared, lists every file the run created or changed.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable
from pathlib import Path

from tests.lab import Lab

# Where cargoship may write on a host: the engines' directories and its own.
ENGINE_DIRS = ("/etc/rancher/", "/var/lib/rancher/", "/var/lib/cargoship/", "/run/cargoship/")
# runit keeps its supervisor state beside each service; restarting the engine changes it,
# and the engine (the lab's stand-in) logs its restart: its log, its events, its API
# server pod's log.
_NOISE = re.compile(r"^/etc/service/[^/]+/(log/)?supervise/|^/var/log/(lab-engine|pods|"
                    r"rke2-server|rke2-agent|k3s|k3s-agent)/")
_BY_MOUNT = (("etc.upper", "/etc"), ("var.upper", "/var"), ("root.upper", "/root"),
             ("usr.upper", "/usr"), ("opt.upper", "/opt"), ("srv.upper", "/srv"),
             ("home", "/home"), ("bin", "/usr/local/bin"), ("rancher-etc", "/etc/rancher"),
             ("rancher-var", "/var/lib/rancher"))
# A hostile value that ran anywhere leaves this behind (inside a host or on this machine).
CANARY = "/tmp/sec-pwned"

Snapshot = dict[str, tuple[int, int]]  # path on the host -> (mtime ns, size)


def snapshot(lab: Lab, host: str) -> Snapshot:
    found: Snapshot = {}
    root = Path(lab.host(host).dir)
    for local, mount in _BY_MOUNT:
        base = root / local
        for directory, _, names in os.walk(base):
            for name in names:
                path = Path(directory) / name
                st = path.lstat()
                found[mount + "/" + str(path.relative_to(base))] = (st.st_mtime_ns, st.st_size)
    listing = lab.exec(host, "find /tmp /run -xdev -type f -printf '%p\\t%T@\\t%s\\n'").stdout
    for line in listing.splitlines():
        path, mtime, size = line.rsplit("\t", 2)
        found[path] = (int(float(mtime) * 1e9), int(size))
    return found


def written_outside_engine_dirs(before: Snapshot, after: Snapshot) -> list[str]:
    changed = (path for path, state in after.items() if before.get(path) != state)
    return sorted(p for p in changed if not p.startswith(ENGINE_DIRS) and not _NOISE.match(p))


def snapshots(lab: Lab, hosts: Iterable[str]) -> dict[str, Snapshot]:
    return {host: snapshot(lab, host) for host in hosts}


def outside_writes(lab: Lab, before: dict[str, Snapshot]) -> dict[str, list[str]]:
    """Per host, what was written outside the engine directories since `before`."""
    found = {host: written_outside_engine_dirs(snap, snapshot(lab, host))
             for host, snap in before.items()}
    return {host: paths for host, paths in found.items() if paths}


def canaries(lab: Lab) -> list[str]:
    """Where the canary exists: on any host of the lab, or on this machine."""
    found = [host.name for host in lab.hosts
             if lab.exec(host.name, f"test -e {shlex.quote(CANARY)}", check=False).returncode == 0]
    return found + (["this machine"] if os.path.lexists(CANARY) else [])


def sessions(lab: Lab, host: str) -> int:
    """SSH logins the host's sshd accepted so far (it logs each one to the console)."""
    console = Path(lab.host(host).dir) / "console.log"
    return console.read_text(errors="replace").count("Accepted publickey")
