"""Where a host's SSH connection goes, as ~/.ssh/config says: HostName, User, Port,
IdentityFile, ProxyJump and ProxyCommand.

The files are parsed once per run (by paramiko's SSHConfig, whose matching rules follow
OpenSSH's), and each name is looked up once: with hundreds of hosts, parsing per host was
a measurable part of a plan's CPU. Files that set nothing a connection here reads (a
stock /etc/ssh/ssh_config: SendEnv, HashKnownHosts, GSSAPI...) answer every name with
the defaults without paramiko at all: importing it was a third of a plan's start-up.
Values given in cluster.yaml win over the files', as they did when fabric resolved them
(its explicit arguments won); the rest is OpenSSH's defaults (port 22, the local user).
"""

from __future__ import annotations

import getpass
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..safetext import tcp_port

if TYPE_CHECKING:
    import paramiko

USER_CONFIG = Path("~/.ssh/config")
SYSTEM_CONFIG = Path("/etc/ssh/ssh_config")
# A line as paramiko's SSHConfig splits it (SETTINGS_REGEX): one it cannot split is its
# parse error, so such a file goes to it.
_SETTING = re.compile(r"(\w+)(?:\s*=\s*|\s+)(.+)")
# The keywords whose values resolve() reads, or that can change them (Match blocks,
# canonicalization): a file with none of these gives every name the defaults.
_READ = frozenset({"hostname", "port", "user", "identityfile", "proxyjump", "proxycommand",
                   "match", "canonicalizehostname"})


@dataclass(frozen=True)
class Hop:
    """One ProxyJump hop as written: [user@]host[:port] (or an ssh:// URI)."""

    host: str
    user: str | None = None
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> Hop:
        text = text.strip().removeprefix("ssh://")
        user, _, hostport = text.rpartition("@")
        host, port = hostport, None
        if hostport.startswith("[") and "]" in hostport:  # [v6]:port
            host, _, rest = hostport[1:].partition("]")
            port = _port(rest[1:], f"ProxyJump {text!r}") if rest.startswith(":") \
                and rest[1:] else None
        elif hostport.count(":") == 1:  # several colons: an IPv6 address, no port
            host, _, port_text = hostport.partition(":")
            port = _port(port_text, f"ProxyJump {text!r}") if port_text else None
        return cls(host, user or None, port)


def _port(value: object, where: str) -> int:
    """A port as ssh_config gives it; a ValueError saying where, not int()'s words."""
    text = str(value).strip()
    number = tcp_port(text)
    if number is None:
        raise ValueError(f"ssh_config: {where}: {text[:40]!r} is not a port (1-65535)")
    return number


@dataclass(frozen=True)
class Target:
    """A connection as resolved: where it goes, as whom, with which extra keys, and how."""

    host: str  # HostName: the address the TCP connection (or the last hop) goes to
    port: int
    user: str
    identity_files: tuple[str, ...] = ()  # IdentityFile entries, in the files' order
    proxy_command: str | None = None  # already %-expanded by paramiko
    proxy_jump: tuple[Hop, ...] = ()  # visited in order, as OpenSSH does

    @property
    def direct(self) -> bool:
        """Whether this process opens the TCP connection to `host` itself."""
        return self.proxy_command is None and not self.proxy_jump

    @property
    def endpoint(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def local_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container's random uid)
        return "root"


@dataclass
class SshConfigFiles:
    """The run's ssh_config files: parsed on first use, once; each name looked up once.

    A file that cannot be parsed fails every lookup with the same error (each host reports
    it as its own connection error), not the run."""

    paths: Sequence[Path] = (USER_CONFIG, SYSTEM_CONFIG)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _parsed: paramiko.SSHConfig | None = field(default=None, repr=False)
    _error: str | None = field(default=None, repr=False)
    _looked_up: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)
    _user: str | None = field(default=None, repr=False)
    _plain: bool | None = field(default=None, repr=False)  # nothing read here is set

    def lookup(self, name: str) -> dict[str, Any]:
        with self._lock:
            found = self._looked_up.get(name)
            if found is None:
                if self._plain is None:
                    self._plain = not self._sets_anything_read()
                found = {} if self._plain else self._paramiko_lookup(name)
                self._looked_up[name] = found
            return found

    def _sets_anything_read(self) -> bool:
        """Whether a file sets something resolve() reads, or has a line paramiko would
        refuse; a file that cannot be read goes to paramiko too, to fail as it fails."""
        for path in self.paths:
            expanded = path.expanduser()
            try:
                if not expanded.is_file():
                    continue
                text = expanded.read_text()
            except (OSError, UnicodeDecodeError):
                return True
            for raw in text.splitlines():
                line = raw.strip()
                if not line or line.startswith("#"):
                    continue
                setting = _SETTING.match(line)
                if setting is None or setting.group(1).lower() in _READ:
                    return True
        return False

    def _paramiko_lookup(self, name: str) -> dict[str, Any]:
        import paramiko

        try:
            return dict(self._config().lookup(name))
        except ImportError:  # paramiko runs `Match exec` through invoke
            raise paramiko.ssh_exception.ConfigParseError(
                "ssh_config's `Match exec` is not supported") from None

    def _config(self) -> paramiko.SSHConfig:
        import paramiko

        if self._error is not None:
            raise paramiko.ssh_exception.ConfigParseError(self._error)
        if self._parsed is None:
            parsed = paramiko.SSHConfig()
            try:
                # Both into one: for each option the first value found wins, so the
                # user's file comes before the system's (as fabric and OpenSSH read them).
                for path in self.paths:
                    expanded = path.expanduser()
                    if expanded.is_file():
                        with expanded.open() as fh:
                            parsed.parse(fh)
            except (OSError, UnicodeDecodeError, paramiko.SSHException) as exc:
                self._error = f"cannot read {path}: {exc}"
                raise paramiko.ssh_exception.ConfigParseError(self._error) from None
            self._parsed = parsed
        return self._parsed

    def local_user(self) -> str:
        if self._user is None:
            self._user = local_user()
        return self._user

    def resolve(self, address: str, port: int | None = None, user: str | None = None,
                extra_keys: Sequence[str] = ()) -> Target:
        """`port` and `user` given (from cluster.yaml) win over the files'; `extra_keys`
        (cluster.yaml's keyPath) come before the files' IdentityFile entries."""
        found = self.lookup(address)
        host = found.get("hostname", address)
        port = port or _port(found.get("port", "22"), f"Port of {address}")
        jump = found.get("proxyjump")
        hops: tuple[Hop, ...] = ()
        if jump and jump.lower() != "none":
            hops = tuple(Hop.parse(h) for h in jump.split(",") if h.strip())
            # A wildcard Host block naming the jump host itself: the jump host is not
            # reached through itself (fabric's rule, which compared the address alone).
            if any(self._endpoint_of(h) == (host, port) for h in hops):
                hops = ()
        command = None if hops else found.get("proxycommand")
        return Target(
            host=host,
            port=port,
            user=user or found.get("user") or self.local_user(),
            identity_files=tuple(dict.fromkeys([*extra_keys,
                                                *found.get("identityfile", [])])),
            proxy_command=command or None,
            proxy_jump=hops,
        )

    def _endpoint_of(self, hop: Hop) -> tuple[str, int]:
        found = self.lookup(hop.host)
        return found.get("hostname", hop.host), \
            hop.port or _port(found.get("port", "22"), f"Port of {hop.host}")

    def resolve_hop(self, hop: Hop) -> Target:
        return self.resolve(hop.host, hop.port, hop.user)
