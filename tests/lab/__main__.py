"""Command line of the lab: up, exec, ls, down, api-fault, etcd. Scripts rely on this
contract."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import DEFAULT_VERSIONS, HostSpec, Lab, LabError, Timing, down_all
from .lab import API_FAULT_KINDS, API_FAULT_MODES


def _specs(args: argparse.Namespace) -> list[HostSpec]:
    oses = [o for o in (args.os or "ubuntu-22.04").split(",") if o]
    names = [(f"ctl-{i}", "controller") for i in range(1, args.controllers + 1)]
    names += [(f"wrk-{i}", "worker") for i in range(1, args.workers + 1)]
    return [HostSpec(name, role, os=oses[i % len(oses)], user=args.user or "root",
                     sudo=not args.no_sudo) for i, (name, role) in enumerate(names)]


def _print_hosts(lab: Lab) -> None:
    for host in lab.hosts:
        version = host.spec.engine_version or lab.version
        engine = f"{lab.distro} {version}" if host.spec.engine_installed else "no engine"
        print(f"{host.name:<10} {host.role:<10} {host.address:<14} {host.spec.os:<18} {engine}")


def _fault_params(parser: argparse.ArgumentParser, pairs: list[str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            parser.error(f"--set {pair!r}: KEY=VALUE expected")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        if key.startswith("set."):  # set.PATH=VALUE: one entry of shape's set
            params.setdefault("set", {})[key[4:]] = value
        else:
            params[key] = value
    return params


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.lab",
                                     description="Real SSH hosts on this machine.")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start hosts and write DIR/cluster.yaml")
    up.add_argument("--dir", type=Path, required=True)
    up.add_argument("--controllers", type=int, default=1)
    up.add_argument("--workers", type=int, default=0)
    up.add_argument("--distro", choices=sorted(DEFAULT_VERSIONS), default="rke2")
    up.add_argument("--os", help="comma list of OS releases, cycled over the hosts")
    up.add_argument("--user", help="a non-root SSH user on every host")
    up.add_argument("--no-sudo", action="store_true", help="the --user gets no sudo")
    default = Timing()
    up.add_argument("--engine-start-seconds", type=float, default=default.engine_start,
                    metavar="S", help="an engine is READY this long after each start but "
                    f"the lab's first (default {default.engine_start:g}; a real one: 30-120)")
    up.add_argument("--kubelet-heartbeat-seconds", type=float,
                    default=default.kubelet_heartbeat, metavar="H",
                    help=f"the kubelet's Lease renewed every H seconds (default "
                         f"{default.kubelet_heartbeat:g}; a real kubelet: 10); its node's "
                         "status is posted when it changes")
    up.add_argument("--node-grace-seconds", type=float, default=default.node_grace,
                    metavar="G", help="a silent node reads Ready until G seconds after its "
                    f"last status (default {default.node_grace:g}; real: 40, 50 from 1.32)")
    up.add_argument("--etcd", action=argparse.BooleanOptionalAction, default=True,
                    help="a real etcd member on every controller, one cluster, each API "
                    "server needing its member's quorum (the default); --no-etcd: the "
                    "controllers share an external datastore (datastore-endpoint)")
    member = sub.add_parser("etcd", help="a controller's etcd member: stop, start, pause "
                            "(SIGSTOP), resume, status, manifest-changed (rke2: the next "
                            "engine start recreates it)")
    member.add_argument("--dir", type=Path, required=True)
    member.add_argument("host")
    member.add_argument("action", choices=("stop", "start", "pause", "resume", "status",
                                           "manifest-changed"))
    run = sub.add_parser("exec", help="run a command inside a host")
    run.add_argument("--dir", type=Path, required=True)
    run.add_argument("host")
    run.add_argument("cmd", nargs=argparse.REMAINDER)
    ls = sub.add_parser("ls", help="list the hosts")
    ls.add_argument("--dir", type=Path, required=True)
    down = sub.add_parser("down", help="remove everything up made")
    target = down.add_mutually_exclusive_group(required=True)
    target.add_argument("--dir", type=Path)
    target.add_argument("--all", action="store_true", help="every lab on this machine")
    down.add_argument("--under", type=Path, help="with --all: only labs below this directory")
    fault = sub.add_parser("api-fault", help="make the API servers answer hostilely "
                           "(tests/lab/kubeapi_hostile.py), or --clear every fault")
    fault.add_argument("--dir", type=Path, required=True)
    fault.add_argument("kind", nargs="?", help=", ".join(API_FAULT_KINDS))
    fault.add_argument("mode", nargs="?", help=", ".join(API_FAULT_MODES))
    fault.add_argument("--node", help="only requests naming this node (or host)")
    fault.add_argument("--times", type=int, help="this many requests (default: until cleared)")
    fault.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="a parameter, VALUE as JSON if it parses (else a string); "
                       "set.PATH=VALUE is one entry of shape's set")
    fault.add_argument("--clear", action="store_true", help="remove every API fault")
    args = parser.parse_args(argv)
    if args.command == "api-fault" and args.clear != (args.kind is None):
        parser.error("api-fault needs KIND MODE, or --clear alone")
    if args.command == "api-fault" and not args.clear and (
            args.kind not in API_FAULT_KINDS or args.mode not in API_FAULT_MODES):
        parser.error(f"api-fault: KIND is one of {', '.join(API_FAULT_KINDS)}; MODE one of "
                     f"{', '.join(API_FAULT_MODES)}")
    try:
        if args.command == "up":
            started = time.monotonic()
            try:
                timing = Timing(args.engine_start_seconds, args.kubelet_heartbeat_seconds,
                                args.node_grace_seconds)
            except ValueError as exc:
                parser.error(f"--engine-start-seconds: {exc}")
            lab = Lab.up(args.dir, _specs(args), distro=args.distro, timing=timing,
                         etcd=args.etcd)
            _print_hosts(lab)
            print(f"{len(lab.hosts)} host(s) up in {time.monotonic() - started:.1f}s; "
                  f"config: {lab.dir / 'cluster.yaml'}", file=sys.stderr)
        elif args.command == "exec":
            cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
            if not cmd:
                parser.error("exec needs a command after --")
            lab = Lab.load(args.dir)
            return subprocess.run([*lab.nsenter(args.host), *cmd]).returncode
        elif args.command == "etcd":
            lab = Lab.load(args.dir)
            if args.action == "status":
                try:
                    print(json.dumps(lab.etcd_call(args.host, "/v3/maintenance/status", {}),
                                     indent=2))
                except OSError as exc:
                    raise LabError(f"the etcd member on {args.host} does not answer: "
                                   f"{exc}") from None
            elif args.action == "manifest-changed":
                lab.etcd_manifest_changed(args.host)
            else:
                lab.etcd_member(args.host, args.action)
        elif args.command == "ls":
            _print_hosts(Lab.load(args.dir))
        elif args.command == "api-fault":
            lab = Lab.load(args.dir)
            if args.clear:
                lab.clear_api_faults()
            else:
                lab.api_fault(args.kind, args.mode, node=args.node, times=args.times,
                              **_fault_params(parser, args.set))
        elif args.all:
            print(f"removed {down_all(args.under)} lab(s)", file=sys.stderr)
        else:
            Lab.load(args.dir).down()
    except LabError as exc:
        print(f"lab: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
