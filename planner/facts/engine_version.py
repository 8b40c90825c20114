"""Engine release strings: `v1.30.4+rke2r1`, `v1.30.4+k3s1`, and `rke2 --version` output."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

# Both anchored, each quantified run ends at a literal it cannot contain: no backtracking.
# At most 9 digits a number: int() of a long digit string is slow, and past 4300 digits a
# bare ValueError, not a VersionError.
_RELEASE = re.compile(r"^v(\d{1,9})\.(\d{1,9})\.(\d{1,9})\+(rke2r|k3s)(\d{1,9})$", re.ASCII)
_VERSION_LINE = re.compile(r"^(rke2|k3s) version (v\S+)")
_MAX_TEXT = 4096  # a release string or a version line; a longer one is none


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
        match = _RELEASE.match(text.strip()) if len(text) <= _MAX_TEXT else None
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
    first = (text.strip()[:_MAX_TEXT + 1].splitlines() or [""])[0]
    match = _VERSION_LINE.match(first) if len(first) <= _MAX_TEXT else None
    if not match:
        raise VersionError(f"unexpected version output {first[:80]!r}")
    version = EngineVersion.parse(match.group(2))
    if version.distro != match.group(1):
        raise VersionError(f"{match.group(1)} reports a {version.distro} release {version}")
    return version
