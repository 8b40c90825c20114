"""/etc/os-release and the kernel: what a host runs."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..hosts.batch import Fact, FactParseError, Output
from .bounds import check_size, size_of

MAX_OS_RELEASE = 64 << 10
# `uname -srm` (three fields of the kernel's utsname, 65 bytes each) and the init system's
# one word: bounded where they come from, so their commands print them as they are.
_MAX_KERNEL = 1024
_MAX_INIT = 64


@dataclass(frozen=True)
class OsRelease:
    id: str
    id_like: tuple[str, ...]
    version_id: str
    pretty_name: str


@dataclass(frozen=True)
class Kernel:
    name: str
    release: str
    machine: str


def parse_os_release(out: Output) -> OsRelease:
    if out.exit_code != 0 or not out.stdout.strip():
        raise FactParseError("/etc/os-release is missing or empty")
    if size_of(out.stdout) > MAX_OS_RELEASE:
        raise FactParseError(f"/etc/os-release is larger than {MAX_OS_RELEASE >> 10} KiB; "
                             "not an os-release file")
    values: dict[str, str] = {}
    for number, line in enumerate(out.stdout.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, raw = line.partition("=")
        if not sep or not key.replace("_", "").isalnum():
            raise FactParseError(f"/etc/os-release line {number} is not KEY=value")
        value = _unquote(raw)
        if value is None:
            raise FactParseError(f"/etc/os-release line {number} has unbalanced quotes")
        values[key] = value
    os_id = values.get("ID", "").lower()
    if not os_id:
        raise FactParseError("/etc/os-release has no ID")
    return OsRelease(
        id=os_id,
        id_like=tuple(values.get("ID_LIKE", "").lower().split()),
        version_id=values.get("VERSION_ID", ""),
        pretty_name=values.get("PRETTY_NAME") or values.get("NAME") or os_id,
    )


def _unquote(raw: str) -> str | None:
    """os-release values: a subset of shell quoting (os-release(5))."""
    if raw[:1] == "'":
        return raw[1:-1] if len(raw) > 1 and raw.endswith("'") else None
    if raw[:1] == '"':
        if len(raw) < 2 or not raw.endswith('"') or (raw.endswith('\\"') and \
                not raw.endswith('\\\\"')):
            return None
        raw = raw[1:-1]
    # One backslash and one character from a class: linear, nothing to backtrack over.
    return re.sub(r'\\([$"`\\])', r"\1", raw)


def parse_kernel(out: Output) -> Kernel:
    parts = check_size(out, _MAX_KERNEL, "uname -srm").split()
    if out.exit_code != 0 or len(parts) != 3:
        raise FactParseError(f"expected 'uname -srm' output, got {out.stdout.strip()[:80]!r}")
    return Kernel(name=parts[0], release=parts[1], machine=parts[2])


def parse_init_system(out: Output) -> str:
    value = check_size(out, _MAX_INIT, "the init system").strip()
    if value not in ("systemd", "runit", "openrc", "unknown"):
        raise FactParseError(f"unexpected init system {value[:40]!r}")
    return value


OS_RELEASE: Fact[OsRelease] = Fact(
    "os-release",
    # /usr/lib/os-release is the fallback the os-release spec itself names. Capped: a huge
    # file would otherwise be sent whole before anything could refuse it.
    f"head -c {MAX_OS_RELEASE + 1} /etc/os-release 2>/dev/null || "
    f"head -c {MAX_OS_RELEASE + 1} /usr/lib/os-release",
    parse_os_release,
)
KERNEL: Fact[Kernel] = Fact("kernel", "uname -srm", parse_kernel)
INIT_SYSTEM: Fact[str] = Fact(
    "init system",
    "if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then echo systemd; "
    # runsvdir running, found by reading /proc/*/comm with the shell's own `read` (what
    # `pgrep -x` matches), not pgrep: a host pays for every process a snapshot starts.
    "elif command -v sv >/dev/null && { r=; for c in /proc/[0-9]*/comm; do "
    "read -r n < \"$c\" && [ \"$n\" = runsvdir ] && { r=1; break; }; done; "
    "[ -n \"$r\" ]; } 2>/dev/null; then echo runit; "
    "elif command -v rc-service >/dev/null; then echo openrc; "
    "else echo unknown; fi",
    parse_init_system,
)
