"""Faults injected into lab hosts at exact points of a rollout.

The engine service is stopped and started through `sv` over SSH. A wrapper installed as
/usr/local/bin/sv inside a host (ahead of /usr/bin/sv on PATH) runs the real `sv` and, when
armed, fires a fault once, right before or right after the engine's `down` or `up`:

    before write:          after  `sv down <engine>`  (stopped, nothing written yet)
    between write, start:  before `sv up <engine>`    (files written, not started)
    after start:           after  `sv up <engine>`    (started, not yet Ready/uncordoned)

The fault is `kill-sshd` (every sshd process, the listener and all sessions, gets SIGKILL;
runit starts the listener again, as systemd would) or `cut` (nftables drops every packet in
and out of the host until `restore_traffic`).
"""

from __future__ import annotations

from tests.lab import Lab

ARM = "/run/lab-fault"
POINTS = {"before write": "down after", "between write and start": "up before",
          "after start": "up after"}

_WRAPPER = r"""#!/bin/sh
# Lab fault injection (tests/reliability/faults.py): transparent unless /run/lab-fault exists.
fire() {
  [ -f /run/lab-fault ] || return 0
  read -r want_cmd want_when action < /run/lab-fault || return 0
  [ "$want_cmd" = "$cmd" ] && [ "$want_when" = "$1" ] || return 0
  case "$target" in *rke2*|*k3s*) ;; *) return 0 ;; esac
  rm -f /run/lab-fault  # once
  echo "$cmd $1 $action" >> /run/lab-fault.fired
  case "$action" in
    kill-sshd) pkill -KILL -x sshd ;;
    cut) nft -f - <<'NFT'
table inet labfault {
  chain in { type filter hook input priority -10; policy drop; iif lo accept; }
  chain out { type filter hook output priority -10; policy drop; oif lo accept; }
}
NFT
    ;;
  esac
}
cmd=$1
for target; do :; done
fire before
/usr/bin/sv "$@"
rc=$?
fire after
exit $rc
"""


def install(lab: Lab, host: str) -> None:
    lab.exec(host, "cat > /usr/local/bin/sv && chmod 755 /usr/local/bin/sv", input=_WRAPPER)


def arm(lab: Lab, host: str, point: str, action: str) -> None:
    """Fire `action` ("kill-sshd" or "cut") once, at `point` (a key of POINTS)."""
    install(lab, host)
    lab.exec(host, f"echo '{POINTS[point]} {action}' > {ARM} && rm -f {ARM}.fired")


def fired(lab: Lab, host: str) -> bool:
    return lab.exec(host, f"test -s {ARM}.fired", check=False).returncode == 0


_IN = "  chain in { type filter hook input priority -10; policy drop; iif lo accept; }\n"
_OUT = "  chain out { type filter hook output priority -10; policy drop; oif lo accept; }\n"


def cut_traffic(lab: Lab, host: str) -> None:
    """The host drops off the network now (its processes keep running)."""
    lab.exec(host, "nft -f -", input="table inet labfault {\n" + _IN + _OUT + "}\n")


def cut_inbound(lab: Lab, host: str) -> None:
    """Nothing reaches the host any more; what it sends still goes out (a one-way loss)."""
    lab.exec(host, "nft -f -", input="table inet labfault {\n" + _IN + "}\n")


def restore_traffic(lab: Lab, host: str) -> None:
    lab.exec(host, "nft delete table inet labfault 2>/dev/null || true")
