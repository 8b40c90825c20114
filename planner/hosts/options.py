"""What every connection of one run shares: settings, and the run's parsed files, gateway
connections and event loop (held here, per run, rather than in module globals)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from .gateways import Gateways
from .host_keys import KnownHostsFiles
from .loop import SshLoop
from .ssh_config import SshConfigFiles


@dataclass(frozen=True)
class ConnectOptions:
    connect_timeout: float = 10.0
    accept_new_host_keys: bool = False
    # Serialises appends to known_hosts files when many hosts connect at once.
    known_hosts_lock: threading.Lock = field(default_factory=threading.Lock)
    # The run's bastion and jump host connections; whoever closes the run's hosts closes
    # these.
    gateways: Gateways = field(default_factory=Gateways)
    # ~/.ssh/config and known_hosts files: each parsed once per run.
    ssh_config: SshConfigFiles = field(default_factory=SshConfigFiles)
    known_hosts: KnownHostsFiles = field(default_factory=KnownHostsFiles)
    # Every connection, handshake and command of the run, in one thread (loop.py).
    loop: SshLoop = field(default_factory=SshLoop)

    def close(self) -> None:
        """The run's gateways, then its loop (which ends whatever still runs there)."""
        self.gateways.close()
        self.loop.close()
