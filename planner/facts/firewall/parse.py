"""parse_firewall: FIREWALL_SCRIPT's output, split into its sections, each to its tool's parser."""

from __future__ import annotations

from dataclasses import dataclass

from ..bounds import check_size, human, size_of
from .firewalld import parse_firewalld
from .iptables import parse_iptables_save, split_iptables_nft
from .model import FirewallParseError, ToolError
from .nft import parse_nft_ruleset
from .script import COMMANDS, LIMITS, MARKER, SECTIONS, TOOLS, TOTAL_LIMIT
from .state import FirewallState
from .ufw import parse_ufw


@dataclass(frozen=True)
class _Section:
    tool: str
    error: bool
    lines: list[str]


def _split_sections(output: str) -> list[_Section]:
    sections: list[_Section] = []
    for line in output.splitlines():
        marker = MARKER.match(line)
        if marker is not None:
            tool = SECTIONS.get(marker["name"])
            if tool is None:
                raise FirewallParseError(f"firewall listing has an unknown section {line!r:.60}")
            sections.append(_Section(tool, bool(marker["error"]), []))
        elif sections:
            sections[-1].lines.append(line)
        elif line.strip():
            raise FirewallParseError(f"firewall listing starts with {line!r:.60}")
    return sections


def _sections(output: str) -> tuple[dict[str, str], tuple[ToolError, ...]]:
    """Each tool's listing (a tool may print several, e.g. two iptables backends), and errors."""
    bodies: dict[str, list[str]] = {}
    errors: list[ToolError] = []
    for section in _split_sections(output):
        if section.error:
            message = next((line.strip() for line in section.lines if line.strip()), "failed")
            errors.append(ToolError(section.tool, message[:300]))
        else:
            bodies.setdefault(section.tool, []).extend(section.lines)
    texts = {}
    for tool, lines in bodies.items():
        text = "\n".join(lines)
        # The script cuts each listing at its limit; one that is over it anyway (another
        # script, a lying shell) is that tool's error, not a parse of a cut ruleset.
        if size_of(text) > LIMITS[tool]:
            errors.append(ToolError(tool, f"{COMMANDS[tool]} printed more than "
                                          f"{human(LIMITS[tool])}; not read"))
        else:
            texts[tool] = text
    return texts, tuple(errors)


def parse_firewall(output: str) -> FirewallState:
    """Pure: the output of FIREWALL_SCRIPT -> what each tool has loaded."""
    check_size(output, TOTAL_LIMIT, "firewall listing", FirewallParseError)
    sections, errors = _sections(output)
    nft = parse_nft_ruleset(sections["nftables"]) if "nftables" in sections else ()
    iptables = parse_iptables_save(sections["iptables"]) if "iptables" in sections else ()
    nft, iptables = split_iptables_nft(nft, iptables)
    firewalld = parse_firewalld(sections["firewalld"]) if "firewalld" in sections else None
    ufw = parse_ufw(sections["ufw"]) if "ufw" in sections else None
    active = {
        "nftables": bool(nft),
        "iptables": bool(iptables),
        "firewalld": bool(firewalld and firewalld.running),
        "ufw": bool(ufw and ufw.active),
    }
    return FirewallState(
        tools=tuple(tool for tool in TOOLS if active[tool]),
        nftables=nft,
        iptables=iptables,
        firewalld=firewalld,
        ufw=ufw,
        errors=errors,
    )
