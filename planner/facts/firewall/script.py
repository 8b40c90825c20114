"""FIREWALL_SCRIPT, the read-only listing run on each host, and the markers of its sections."""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from ..bounds import human

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
# - Every listing is cut at its tool's LIMITS (and firewalld's at 256 services): one over it
#   is reported as the tool's error, "... printed more than N; not read", never printed cut
#   short (a cut ruleset would be judged as if it were whole).
_TEMPLATE: Final[str] = r"""(
set -f
LC_ALL=C; export LC_ALL
PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"; export PATH
_fw_nl='
'
# _fw_run LIMIT CMD...: CMD's stdout in _fw_out, its status in _fw_rc, or _fw_rc=big when
# it printed more than LIMIT bytes (head stops it there: a tool that prints forever ends).
# The status rides behind the output, as POSIX sh has no pipefail; the last "#rc" line is
# ours whatever the tool printed.
_fw_run() {
    _fw_lim=$1; shift
    _fw_out=$( { "$@" 2>/dev/null; printf '\n#rc %s' "$?"; } | head -c $((_fw_lim + 16)) )
    case $_fw_out in
    *"$_fw_nl#rc "*)
        _fw_rc=${_fw_out##*"$_fw_nl#rc "}
        _fw_out=${_fw_out%"$_fw_nl#rc "*}
        _fw_out=${_fw_out%"$_fw_nl"}
        ;;
    *) _fw_rc=big ;;
    esac
    [ ${#_fw_out} -le "$_fw_lim" ] || _fw_rc=big
}
# The first line of what a failed CMD says on stderr (at most 1 KiB of it).
_fw_why() {
    "$@" 2>&1 >/dev/null | head -c 1024 | head -n 1
}
_fw_section() {
    _fw_name=$1; _fw_lim=$2; _fw_size=$3; shift 3
    _fw_run "$_fw_lim" "$@"
    case $_fw_rc in
    0) printf '### %s\n%s\n' "$_fw_name" "$_fw_out" ;;
    big) printf '### %s error\n%s printed more than %s; not read\n' "$_fw_name" "$1" "$_fw_size" ;;
    *)
        _fw_err=$(_fw_why "$@")
        printf '### %s error\n%s\n' "$_fw_name" "${_fw_err:-$1 exited with status $_fw_rc}"
        ;;
    esac
}
if command -v nft >/dev/null 2>&1; then
    _fw_section nft @nftables_bytes@ '@nftables_size@' nft -j list ruleset
fi
# _fw_find CMD: CMD's path on the PATH in _fw_p (empty if none), as `command -v` finds
# it, with no subshell to start.
_fw_find() {
    _fw_p=; _fw_ifs=$IFS; IFS=:
    for _fw_d in $PATH; do
        [ -f "${_fw_d:-.}/$1" ] && [ -x "${_fw_d:-.}/$1" ] && { _fw_p=${_fw_d:-.}/$1; break; }
    done
    IFS=$_fw_ifs
}
_fw_ipt=""; _fw_seen=""; _fw_ipt_err=""; _fw_ran1=""; _fw_ran2=""
for _fw_cmd in iptables-legacy-save iptables-nft-save iptables-save; do
    _fw_find "$_fw_cmd"
    [ -n "$_fw_p" ] || continue
    # iptables-save is a link (update-alternatives) to one of the others, or both are
    # links to one multi-call binary: the same program, the same family, printed once.
    # (A `test` without -ef says no, and it runs as any other.)
    if [ "$_fw_p" -ef "$_fw_ran1" ] || [ "$_fw_p" -ef "$_fw_ran2" ]; then continue; fi
    _fw_ran2=$_fw_ran1; _fw_ran1=$_fw_p
    # iptables-legacy-save prints the tables the kernel names in ip_tables_names: none
    # named (or no legacy iptables at all), it would print nothing, so it is not run
    # (and, a listing, never has the kernel load a module).
    if [ "$_fw_cmd" = iptables-legacy-save ]; then
        _fw_t=; { read -r _fw_t < /proc/net/ip_tables_names; } 2>/dev/null
        [ -n "$_fw_t" ] || continue
    fi
    _fw_run @iptables_bytes@ "$_fw_cmd"
    case $_fw_rc in
    0)
        [ -n "$_fw_out" ] || continue
        case $_fw_out in *'(nf_tables)'*) _fw_kind=nf_tables ;; *) _fw_kind=legacy ;; esac
        case $_fw_seen in *"$_fw_kind"*) continue ;; esac
        _fw_seen="$_fw_seen $_fw_kind"
        _fw_ipt="$_fw_ipt$_fw_out
"
        ;;
    big) _fw_ipt_err="$_fw_cmd printed more than @iptables_size@; not read" ;;
    *)
        _fw_ipt_err=$(_fw_why "$_fw_cmd")
        _fw_ipt_err=${_fw_ipt_err:-$_fw_cmd failed}
        ;;
    esac
done
if [ ${#_fw_ipt} -gt @iptables_bytes@ ]; then
    _fw_ipt=""; _fw_ipt_err="iptables-save printed more than @iptables_size@; not read"
fi
if [ -n "$_fw_ipt" ]; then
    printf '### iptables\n%s' "$_fw_ipt"
fi
if [ -n "$_fw_ipt_err" ]; then
    printf '### iptables error\n%s\n' "$_fw_ipt_err"
fi
if command -v firewall-cmd >/dev/null 2>&1; then
    _fw_state=$(firewall-cmd --state 2>&1 | head -c 1024 | head -n 1)
    case $_fw_state in
    running)
        # The zone and every service it names (and what they include), each once, at
        # most 256 of them, kept until the end: a listing over its limit is not printed.
        _fw_run @firewalld_bytes@ firewall-cmd --list-all
        _fw_all="running
$_fw_out"
        _fw_todo=""
        [ "$_fw_rc" = 0 ] && _fw_todo=$(printf '%s\n' "$_fw_out" | sed -n 's/^  services: *//p')
        _fw_done=" "; _fw_count=0
        while [ -n "$_fw_todo" ] && [ "$_fw_rc" = 0 ]; do
            set -- $_fw_todo
            _fw_todo=""
            for _fw_svc; do
                case $_fw_done in *" $_fw_svc "*) continue ;; esac
                _fw_done="$_fw_done$_fw_svc "
                _fw_count=$((_fw_count + 1))
                [ "$_fw_count" -le 256 ] || { _fw_rc=many; break; }
                _fw_run @firewalld_bytes@ firewall-cmd --info-service="$_fw_svc"
                case $_fw_rc in
                0) ;;
                big) break ;;
                *) _fw_rc=0; continue ;;
                esac
                _fw_all="$_fw_all
$_fw_out"
                [ ${#_fw_all} -le @firewalld_bytes@ ] || { _fw_rc=big; break; }
                _fw_todo="$_fw_todo $(printf '%s\n' "$_fw_out" | sed -n 's/^  includes: *//p')"
            done
            _fw_todo=$(echo $_fw_todo)
        done
        case $_fw_rc in
        0) printf '### firewalld\n%s\n' "$_fw_all" ;;
        big) printf '### firewalld error\n%s\n' \
            "firewall-cmd printed more than @firewalld_size@; not read" ;;
        many) printf '### firewalld error\n%s\n' \
            "the default zone names more than 256 services; not read" ;;
        *)
            _fw_err=$(_fw_why firewall-cmd --list-all)
            printf '### firewalld error\n%s\n' "${_fw_err:-firewall-cmd --list-all failed}"
            ;;
        esac
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
    _fw_section ufw @ufw_bytes@ '@ufw_size@' ufw status verbose
fi
) 2>/dev/null
"""

TOOLS: Final = ("nftables", "iptables", "firewalld", "ufw")
# The most each tool's listing may be, in bytes. Generous for the kernel rulesets (kube-proxy
# writes thousands of rules); all of them together stay under the 16 MiB a host may send
# for one command (hosts/ssh.py MAX_OUTPUT). A ufw or firewalld listing is a few KiB.
LIMITS: Final[Mapping[str, int]] = MappingProxyType(
    {"nftables": 6 << 20, "iptables": 4 << 20, "firewalld": 1 << 20, "ufw": 1 << 20}
)
# What the whole listing may be: every tool at its limit, and the markers and error lines.
TOTAL_LIMIT: Final = sum(LIMITS.values()) + (64 << 10)
# The command each tool's messages name.
COMMANDS: Final[Mapping[str, str]] = MappingProxyType(
    {"nftables": "nft", "iptables": "iptables-save", "firewalld": "firewall-cmd", "ufw": "ufw"}
)


def _script() -> str:
    script = _TEMPLATE
    for tool, limit in LIMITS.items():
        script = script.replace(f"@{tool}_bytes@", str(limit))
        script = script.replace(f"@{tool}_size@", human(limit))
    return script


FIREWALL_SCRIPT: Final[str] = _script()
SECTIONS: Final[Mapping[str, str]] = MappingProxyType(
    {"nft": "nftables", "iptables": "iptables", "firewalld": "firewalld", "ufw": "ufw"}
)
# Each section starts with `### <name>`, or `### <name> error` when the listing failed.
# Anchored, and `\S+` cannot run into the " error" after it: no backtracking on any line.
MARKER: Final = re.compile(r"^### (?P<name>\S+)(?P<error> error)?$")
