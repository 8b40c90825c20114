"""How every plan, record and report names a host. Its own module: a run names hosts from
its first dial on, long before it needs the rest of the plan's model."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class HostRef:
    """How a plan, a record or a JSON output names a host. A host *is* its address and
    port: two hosts behind one address on different ports are two hosts."""

    name: str  # its hostname when known, else its address
    address: str
    port: int = 22

    @property
    def key(self) -> tuple[str, int]:
        return (self.address, self.port)

    def __str__(self) -> str:
        where = self.address if self.port == 22 else f"{self.address}:{self.port}"
        return where if self.name == self.address else f"{self.name} ({where})"
