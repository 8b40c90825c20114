"""5. Validate hosts: the preflight. Every problem of every host is collected, none hides another.

Per host: root or passwordless sudo, an architecture the engine ships, a firewall that
does not block the engine's ports. Across hosts: unique hostnames and private addresses,
and each clock within the allowed skew of the median of all hosts.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from ..context import HostState, PlanContext
from ..facts.firewall import FIREWALL_SCRIPT, FirewallParseError, engine_ports
from ..facts.system import CLOCK, PRIVILEGE, as_root
from ..hosts.batch import Fact
from .base import DryRun, Phase

# What each engine ships binaries for, by `uname -m`.
SUPPORTED_ARCH = {
    "rke2": {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64", "s390x": "s390x"},
    "k3s": {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64", "armv7l": "arm",
            "s390x": "s390x"},
}


def _firewall_fact() -> Fact[str]:
    # Parsed later, per host, so a firewall we can't read is a problem, not a lost host.
    return Fact("firewall", as_root(FIREWALL_SCRIPT), lambda out: out.stdout)


def _facts(ctx: PlanContext) -> list[Fact[Any]]:
    return [PRIVILEGE, CLOCK, *([_firewall_fact()] if ctx.config.options.check_firewall
                                else [])]


class ValidateHosts(Phase):
    title = "Validate hosts"
    dry_run = DryRun.RUNS_READ_ONLY

    def prefetch(self, ctx: PlanContext, host: HostState) -> list[tuple[Fact[Any], bool]]:
        return [(fact, False) for fact in _facts(ctx)]

    def run(self, ctx: PlanContext) -> None:
        check_firewall = ctx.config.options.check_firewall
        offsets: dict[str, float] = {}
        gathered = ctx.gather(self.title, lambda _: _facts(ctx))
        for host, values in gathered:
            privilege, clock = values[0], values[1]
            host.privilege = privilege
            # Each remote clock against the midpoint of the read that answered (the
            # snapshot's, or this phase's own): well under a second, far below any
            # sensible skew limit.
            assert host.reader is not None
            started, finished = host.reader.read_window
            offsets[host.label] = clock - (started + finished) / 2
            notes = [self._privilege(ctx, host), self._arch(ctx, host)]
            if check_firewall and privilege.can_write:
                notes.append(self._firewall(ctx, host, values[2]))
            ctx.found(self.title, host, ", ".join(n for n in notes if n))
        self._unique(ctx)
        self._clock_skew(ctx, offsets)
        for host in ctx.active_hosts():
            if any(p.host == host.config.index and p.phase == self.title for p in ctx.problems):
                host.error = "failed validation"

    def _privilege(self, ctx: PlanContext, host: HostState) -> str:
        assert host.privilege is not None and host.reader is not None
        user = host.reader.user
        if host.privilege.uid == 0:
            return "root"
        if host.privilege.sudo:
            return f"{user} with passwordless sudo"
        ctx.problem(self.title, host, f"user {user} is not root and cannot run "
                                      "sudo without a password (sudo -n true failed)")
        return ""

    def _arch(self, ctx: PlanContext, host: HostState) -> str:
        assert host.kernel is not None
        distro = ctx.config.engine.distro
        arch = SUPPORTED_ARCH[distro].get(host.kernel.machine)
        if arch is None:
            supported = ", ".join(sorted(set(SUPPORTED_ARCH[distro].values())))
            ctx.problem(self.title, host, f"CPU architecture {host.kernel.machine} is not "
                                          f"supported by {distro} (supported: {supported})")
            return ""
        return f"arch {arch}"

    def _firewall(self, ctx: PlanContext, host: HostState, output: str) -> str:
        # The parsers cost ~60 ms to import: only once a firewall listing is in.
        from ..facts.firewall.parse import parse_firewall

        try:
            state = parse_firewall(output)
        except FirewallParseError as exc:
            ctx.problem(self.title, host, f"cannot read the firewall rules: {exc}")
            return ""
        ports = engine_ports(ctx.config.engine.distro, host.config.role)
        for error in state.errors:
            ctx.warn(self.title, host, f"could not read {error.tool} rules, ports not checked "
                                       f"against them: {error.message}")
        # A front end (ufw, firewalld) and the kernel ruleset it writes can both block the
        # same port: one problem per port, naming every reason.
        reasons: dict[str, list[str]] = {}
        purposes: dict[str, str] = {}
        for item in state.blocked(ports):
            key = f"{item.port.number}/{item.port.proto}"
            reasons.setdefault(key, []).append(item.reason)
            purposes[key] = item.port.purpose
        for key, why in reasons.items():
            ctx.problem(self.title, host, f"firewall blocks {key} ({purposes[key]}): "
                                          + "; ".join(why))
        tools = ", ".join(state.tools) or "no firewall"
        return f"firewall ({tools}) leaves engine ports open" if not reasons else ""

    def _unique(self, ctx: PlanContext) -> None:
        for attribute, what in (("hostname", "hostname"), ("private_address", "private address")):
            owners: dict[str, list[HostState]] = defaultdict(list)
            for host in ctx.active_hosts():
                value = getattr(host, attribute)
                if value:
                    owners[str(value).lower()].append(host)
            for value, hosts in owners.items():
                if len(hosts) > 1:
                    others = ", ".join(h.config.ssh.address for h in hosts)
                    for host in hosts:
                        ctx.problem(self.title, host,
                                    f"{what} {value} is not unique (shared by {others})")

    def _clock_skew(self, ctx: PlanContext, offsets: dict[str, float]) -> None:
        if len(offsets) < 2:
            return
        median = _median(offsets.values())
        limit = ctx.config.options.max_clock_skew
        for host in ctx.active_hosts():
            offset = offsets.get(host.label)
            if offset is not None and abs(offset - median) > limit:
                ctx.problem(self.title, host, f"clock is {offset - median:+.1f}s off the median "
                                              f"of all hosts (allowed: ±{limit:g}s)")


def _median(values: Iterable[float]) -> float:
    """statistics.median, without importing it (with decimal and fractions) for one sort."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
