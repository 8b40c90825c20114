"""FIREWALL_SCRIPT, the read-only listing run on each host, and the markers of its sections."""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

# The snippet only lists: every command in it is a read-only query. Notes on the choices:
# - A failed listing is run once more to fetch its first stderr line: that keeps warnings off
#   stdout without a temp file, and a second read-only listing costs nothing.
# - All iptables-save variants present are run and each backend is printed once (the header
#   says "(nf_tables)" for iptables-nft): iptables-legacy tables are invisible to nft, and the
#   nf_tables ones appear in `nft -j` only as opaque "xt" matches (multiport, conntrack...),
#   so the parser judges those tables from the iptables-save text instead of twice.
# - `firewall-cmd --state` prints "not running" on stderr with status 252: an answer, not an
#   error. The services of the default zone (and what they include) are listed with
#   --info-service, so custom services such as an "rke2" one are read, not guessed.
# - LC_ALL=C because ufw translates "Status: active".
FIREWALL_SCRIPT: Final[str] = r"""(
set -f
LC_ALL=C; export LC_ALL
PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"; export PATH
_fw_section() {
    _fw_name=$1; shift
    if _fw_out=$("$@" 2>/dev/null); then
        printf '### %s\n%s\n' "$_fw_name" "$_fw_out"
    else
        _fw_rc=$?
        _fw_err=$("$@" 2>&1 >/dev/null | head -n 1)
        printf '### %s error\n%s\n' "$_fw_name" "${_fw_err:-$1 exited with status $_fw_rc}"
    fi
}
if command -v nft >/dev/null 2>&1; then
    _fw_section nft nft -j list ruleset
fi
_fw_ipt=""; _fw_seen=""; _fw_ipt_err=""
for _fw_cmd in iptables-legacy-save iptables-nft-save iptables-save; do
    command -v "$_fw_cmd" >/dev/null 2>&1 || continue
    if _fw_out=$("$_fw_cmd" 2>/dev/null); then
        [ -n "$_fw_out" ] || continue
        case $_fw_out in *'(nf_tables)'*) _fw_kind=nf_tables ;; *) _fw_kind=legacy ;; esac
        case $_fw_seen in *"$_fw_kind"*) continue ;; esac
        _fw_seen="$_fw_seen $_fw_kind"
        _fw_ipt="$_fw_ipt$_fw_out
"
    else
        _fw_ipt_err=$("$_fw_cmd" 2>&1 >/dev/null | head -n 1)
        _fw_ipt_err=${_fw_ipt_err:-$_fw_cmd failed}
    fi
done
if [ -n "$_fw_ipt" ]; then
    printf '### iptables\n%s' "$_fw_ipt"
fi
if [ -n "$_fw_ipt_err" ]; then
    printf '### iptables error\n%s\n' "$_fw_ipt_err"
fi
if command -v firewall-cmd >/dev/null 2>&1; then
    _fw_state=$(firewall-cmd --state 2>&1 | head -n 1)
    case $_fw_state in
    running)
        if _fw_zone=$(firewall-cmd --list-all 2>/dev/null); then
            printf '### firewalld\nrunning\n%s\n' "$_fw_zone"
            _fw_todo=$(printf '%s\n' "$_fw_zone" | sed -n 's/^  services: *//p')
            _fw_done=" "
            while [ -n "$_fw_todo" ]; do
                set -- $_fw_todo
                _fw_todo=""
                for _fw_svc; do
                    case $_fw_done in *" $_fw_svc "*) continue ;; esac
                    _fw_done="$_fw_done$_fw_svc "
                    _fw_info=$(firewall-cmd --info-service="$_fw_svc" 2>/dev/null) || continue
                    printf '%s\n' "$_fw_info"
                    _fw_todo="$_fw_todo $(printf '%s\n' "$_fw_info" | sed -n 's/^  includes: *//p')"
                done
                _fw_todo=$(echo $_fw_todo)
            done
        else
            _fw_err=$(firewall-cmd --list-all 2>&1 >/dev/null | head -n 1)
            printf '### firewalld error\n%s\n' "${_fw_err:-firewall-cmd --list-all failed}"
        fi
        ;;
    "not running")
        printf '### firewalld\nnot running\n'
        ;;
    *)
        printf '### firewalld error\n%s\n' "${_fw_state:-firewall-cmd --state printed nothing}"
        ;;
    esac
fi
if command -v ufw >/dev/null 2>&1; then
    _fw_section ufw ufw status verbose
fi
) 2>/dev/null
"""

TOOLS: Final = ("nftables", "iptables", "firewalld", "ufw")
SECTIONS: Final[Mapping[str, str]] = MappingProxyType(
    {"nft": "nftables", "iptables": "iptables", "firewalld": "firewalld", "ufw": "ufw"}
)
# Each section starts with `### <name>`, or `### <name> error` when the listing failed.
MARKER: Final = re.compile(r"^### (?P<name>\S+)(?P<error> error)?$")
