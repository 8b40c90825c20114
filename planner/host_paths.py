"""Every place cargoship owns on a host, in one list: the planner reads them, the executor
writes them, and each is named once. All are root's alone (see facts/lock_holder.py GUARD)."""

from __future__ import annotations

# Locks: on tmpfs, so a reboot (which ends every run) clears them.
LOCK_DIR = "/run/cargoship"
LOCK_PATH = f"{LOCK_DIR}/lock"
# Held (flock) by a host's restart script while it swaps the engine's files.
SWAP_LOCK_PATH = f"{LOCK_DIR}/swap.lock"
# What outlives a run: apply records, backups, the in-progress marker.
STATE_DIR = "/var/lib/cargoship"
RECORD_DIR = f"{STATE_DIR}/applied"
