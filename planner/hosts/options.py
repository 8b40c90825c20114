"""What every connection of one run shares: settings, and the run's parsed files and
gateway connections (held here, per run, rather than in module globals)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from .gateways import Gateways
from .handshake import PrivateKeys
from .host_keys import KnownHostsFiles
from .reach import Dialled
from .ssh_config import SshConfigFiles
from .ssh_loop import SshLoop


@dataclass(frozen=True)
class ConnectOptions:
    connect_timeout: float = 10.0
    accept_new_host_keys: bool = False
    # Serialises appends to known_hosts files when many hosts connect at once.
    known_hosts_lock: threading.Lock = field(default_factory=threading.Lock)
    # The run's bastion and jump host connections; whoever closes the run's hosts closes
    # these.
    gateways: Gateways = field(default_factory=Gateways)
    # TCP connections to directly reached hosts, all opened at once (reach.py).
    dialled: Dialled = field(default_factory=Dialled)
    # ~/.ssh/config, known_hosts files and key files: each parsed once per run.
    ssh_config: SshConfigFiles = field(default_factory=SshConfigFiles)
    known_hosts: KnownHostsFiles = field(default_factory=KnownHostsFiles)
    keys: PrivateKeys = field(default_factory=PrivateKeys)
    # The plan's libssh2 handshakes and reads (libssh2.py), in one thread once started.
    loop: SshLoop = field(default_factory=SshLoop)
