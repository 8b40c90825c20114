#!/usr/bin/env bash
# Everything cargoship's demo and tests need on a fresh Debian machine, as root:
# the lab's system packages and a virtualenv (.venv) with cargoship and its dev tools.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "setup: run as root (the lab makes network, mount and PID namespaces)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# openssh-server/runit/iproute2: lab hosts; nftables/iptables/sudo/faketime: validation cases;
# python3-yaml: the lab's stand-in engine runs on the system Python.
# zsh/fish: the completion scripts are tested in the shells they are for.
# etcd-server: the lab's controllers run real etcd members (tests/lab/etcd.py); curl: what
# cargoship reads etcd's JSON gateway with on a host, as on real rke2/k3s hosts.
PACKAGES="openssh-server openssh-client runit iproute2 nftables iptables sudo faketime
  libfaketime python3 python3-yaml python3-venv procps util-linux zsh fish shellcheck
  etcd-server curl"
# kubectl: a test runs it against the lab through the kubeconfig cargoship merges. Any
# kubectl on PATH does; else Debian's own (package kubernetes-client).
if ! command -v kubectl >/dev/null 2>&1; then PACKAGES="$PACKAGES kubernetes-client"; fi
# Installed already (the usual case after the first run): no apt round trip at all.
installed() { dpkg-query -W -f='${Status}\n' "$@" 2>/dev/null | grep -c '^install ok installed$'; }
# shellcheck disable=SC2086
if [ "$(installed $PACKAGES)" -ne "$(echo $PACKAGES | wc -w)" ]; then
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $PACKAGES >/dev/null
fi
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# Installed from this very pyproject.toml already: nothing to do (pip takes seconds to say so).
STAMP=.venv/.cargoship-setup
WANT=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ] || [ ! -x .venv/bin/cargoship ]; then
  .venv/bin/pip install -q --upgrade pip >/dev/null
  .venv/bin/pip install -q -e '.[dev]'
  echo "$WANT" > "$STAMP"
fi
