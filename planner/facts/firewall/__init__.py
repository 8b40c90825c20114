"""Does the host's firewall let the engine's ports in?

A fact in two halves: FIREWALL_SCRIPT lists what each firewall tool on the host has loaded,
read-only, and parse_firewall turns that listing into a FirewallState that answers, port by
port, which tool blocks a new inbound connection and where.

What "blocked" means here: a new TCP connection (or UDP flow) from another cluster node,
arriving on a network interface, to one of the host's own addresses. The peer's address is
not known at validation time, so a rule that only matches some sources (or destinations,
interfaces, marks, rates...) is never taken as deciding; when that leaves a port blocked,
the reason names the rules that were not counted so the user can judge. Matches that are
understood exactly: the layer-4 protocol, the destination port (numbers, ranges, sets,
named sets, verdict maps), conntrack state (a new connection is "new", never
established/related), the input interface only when it is loopback, and the IP version.

Each tool is judged on its own, so a port closed by ufw or firewalld usually shows up twice:
once from the front-end (what to change) and once from the kernel ruleset it generated (where
exactly). The one real duplicate, a table that iptables-nft wrote into nftables, is judged
once; see iptables.split_iptables_nft.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

# What a plan needs before it reads any host (the script, the ports, the errors) is
# imported here; the parsers (~60 ms of imports) only when a name of theirs is first used.
from .model import BlockedPort, FirewallParseError, Port, ToolError
from .ports import engine_ports
from .script import FIREWALL_SCRIPT, TOOLS

if TYPE_CHECKING:
    from .firewalld import FirewalldService, FirewalldState, FirewalldZone
    from .parse import parse_firewall
    from .state import FirewallState
    from .ufw import UfwRule, UfwState

_LAZY = {"FirewalldService": ".firewalld", "FirewalldState": ".firewalld",
         "FirewalldZone": ".firewalld", "parse_firewall": ".parse",
         "FirewallState": ".state", "UfwRule": ".ufw", "UfwState": ".ufw"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "FIREWALL_SCRIPT",
    "TOOLS",
    "BlockedPort",
    "FirewallParseError",
    "FirewallState",
    "FirewalldService",
    "FirewalldState",
    "FirewalldZone",
    "Port",
    "ToolError",
    "UfwRule",
    "UfwState",
    "engine_ports",
    "parse_firewall",
]
