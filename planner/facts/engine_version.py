"""Engine release strings: `v1.30.4+rke2r1`, `v1.30.4+k3s1`, and `rke2 --version` output."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

_RELEASE = re.compile(r"^v(\d+)\.(\d+)\.(\d+)\+(rke2r|k3s)(\d+)$")
_VERSION_LINE = re.compile(r"^(rke2|k3s) version (v\S+)")


class VersionError(ValueError):
    pass


@total_ordering
@dataclass(frozen=True)
class EngineVersion:
    major: int
    minor: int
    patch: int
    distro: str  # "rke2" or "k3s"
    build: int

    @classmethod
    def parse(cls, text: str) -> EngineVersion:
        match = _RELEASE.match(text.strip())
        if not match:
            raise VersionError(f"cannot parse engine version {text.strip()[:60]!r} "
                               "(expected like v1.30.4+rke2r1 or v1.30.4+k3s1)")
        major, minor, patch, flavour, build = match.groups()
        distro = "rke2" if flavour == "rke2r" else "k3s"
        return cls(int(major), int(minor), int(patch), distro, int(build))

    def _key(self) -> tuple[int, int, int, int]:
        return (self.major, self.minor, self.patch, self.build)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, EngineVersion):
            return NotImplemented
        return self._key() < other._key()

    def __str__(self) -> str:
        flavour = "rke2r" if self.distro == "rke2" else "k3s"
        return f"v{self.major}.{self.minor}.{self.patch}+{flavour}{self.build}"


def parse_version_output(text: str) -> EngineVersion:
    """First line of `rke2 --version` / `k3s --version`."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    match = _VERSION_LINE.match(first)
    if not match:
        raise VersionError(f"unexpected version output {first[:80]!r}")
    version = EngineVersion.parse(match.group(2))
    if version.distro != match.group(1):
        raise VersionError(f"{match.group(1)} reports a {version.distro} release {version}")
    return version
