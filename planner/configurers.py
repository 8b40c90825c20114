"""OS configurers: what cargoship needs to know per OS family.

Picked from /etc/os-release: by ID first, then by each ID_LIKE entry in order (so a
derivative such as Linux Mint or Pop!_OS gets its parent's configurer).
"""

from __future__ import annotations

from dataclasses import dataclass

from .facts.os_release import OsRelease


@dataclass(frozen=True)
class Configurer:
    family: str
    ids: frozenset[str]

    def describe(self) -> str:
        return f"{self.family} family"


CONFIGURERS = (
    Configurer("debian", frozenset({"debian", "ubuntu", "raspbian", "linuxmint", "pop"})),
    Configurer("rhel", frozenset({"rhel", "centos", "rocky", "almalinux", "ol", "fedora",
                                  "amzn"})),
    Configurer("suse", frozenset({"sles", "sled", "opensuse", "opensuse-leap",
                                  "opensuse-tumbleweed", "sle-micro", "suse"})),
    Configurer("alpine", frozenset({"alpine"})),
)


class UnsupportedOs(ValueError):
    pass


def pick(release: OsRelease) -> Configurer:
    for candidate in (release.id, *release.id_like):
        for configurer in CONFIGURERS:
            if candidate in configurer.ids:
                return configurer
    like = " ".join(release.id_like) or "none"
    supported = ", ".join(c.family for c in CONFIGURERS)
    raise UnsupportedOs(f"unsupported OS {release.pretty_name!r} (ID={release.id}, "
                        f"ID_LIKE={like}); supported families: {supported}")
