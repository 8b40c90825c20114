"""The benchmark of issue 6: plan at fleet scale behind WAN latency, side by side with
Ansible, and an apply rollout against its ideal. As root, from the checkout:

    python -m tests.bench                       # the full run (about 30 minutes here)
    python -m tests.bench --sizes 2 --latencies 20 --rollout-workers 2 --concurrency 2
                                                # the smoke size

Lab hosts, proxies and their files live under --work (default: a new /tmp/bench-* dir)
and are removed at the end unless --keep.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from .ansible import AnsibleResult, bench_ansible, ensure_ansible
from .fleet import start_fleet
from .measure import compile_sources, load_average, settle
from .plans import PlanResult, StartupResult, bench_plan, bench_startup
from .report import (
    baseline_table,
    plan_table,
    rollout_table,
    round_trip_lines,
    targets,
    targets_15,
)
from .rollout import RolloutResult, bench_rollout, start_lab


def _numbers(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=_numbers, default=[10, 50, 100, 200],
                        help="host counts for the plan (default 10,50,100,200)")
    parser.add_argument("--latencies", type=_floats, default=[0.0, 20.0],
                        help="one-way delays in ms (default 0,20)")
    parser.add_argument("--reps", type=int, default=3, help="plan runs per cell (median)")
    parser.add_argument("--no-ansible", action="store_true", help="skip the Ansible runs")
    parser.add_argument("--ansible-sizes", type=_numbers,
                        help="host counts for Ansible (default: every --sizes up to 100; "
                             "200 forks of Ansible need ~5 CPU-minutes per run here)")
    parser.add_argument("--no-install", action="store_true",
                        help="do not pip-install ansible-core when it is missing")
    parser.add_argument("--rollout-workers", type=int, default=20)
    parser.add_argument("--rollout-controllers", type=int, default=1)
    parser.add_argument("--concurrency", type=_numbers, default=[1, 4, 8],
                        help="worker concurrency of the rollouts (default 1,4,8)")
    parser.add_argument("--drain", type=float, default=1.5, help="seconds per node drain")
    parser.add_argument("--restart", type=float, default=2.5,
                        help="seconds from engine start to node Ready (2 at least: "
                        "tests/lab/spec.py Timing)")
    parser.add_argument("--no-rollout", action="store_true")
    parser.add_argument("--work", type=Path, help="work dir (default: new /tmp/bench-*)")
    parser.add_argument("--keep", action="store_true", help="leave the labs up")
    args = parser.parse_args(argv)
    if args.restart < 2:
        parser.error("--restart: 2 s at least (tests/lab/spec.py Timing says why)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # A TERM (or an INT where the shell ignores it for background jobs) still cleans up.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if os.geteuid() != 0:
        print("bench: needs root (the lab makes network, mount and PID namespaces)",
              file=sys.stderr)
        return 1
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-", dir="/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    cores = os.cpu_count() or 1
    compile_sources()
    started, load_before = time.monotonic(), load_average()
    ansible_cmd = None if args.no_ansible else ensure_ansible(not args.no_install)
    plans: list[PlanResult] = []
    ansible: list[AnsibleResult] = []
    rollouts: list[RolloutResult] = []
    notes: list[str] = []
    if not args.no_ansible and ansible_cmd is None:
        notes.append("ansible-playbook not found and not installed: Ansible column empty")
    fleet = None
    startup: StartupResult | None = None
    try:
        if args.sizes and args.latencies:
            startup = bench_startup()
            _say(f"starting {max(args.sizes)} lab host(s) in {work}")
            fleet = start_fleet(work, max(args.sizes))
            # Hundreds of hosts' engines are still starting when the lab is up (the load
            # average passes 100 at 500 hosts): the first plans would measure that.
            notes.append(_settled("the plans", 0.5 * max(args.sizes)))
            for delay in args.latencies:
                for size in sorted(args.sizes):
                    _say(f"plan: {size} hosts, {delay:g} ms")
                    plans.append(bench_plan(fleet, size, delay, args.reps))
                    ansible_sizes = args.ansible_sizes if args.ansible_sizes is not None \
                        else [n for n in args.sizes if n <= 100]
                    if ansible_cmd and size in ansible_sizes:
                        _say(f"ansible: {size} hosts, {delay:g} ms")
                        ansible.append(bench_ansible(fleet, ansible_cmd, size, delay))
            fleet.stop()
            if not args.keep:
                fleet.lab.down()
            fleet = None
        if not args.no_rollout and args.concurrency:
            if args.sizes and args.latencies:
                # The kernel tears the plan lab's namespaces down in the background, for
                # minutes after 500 hosts: wait for it, half a second a host at most.
                notes.append(_settled("the rollout", 0.5 * max(args.sizes)))
            _say(f"starting the rollout lab ({args.rollout_controllers} + "
                 f"{args.rollout_workers})")
            lab = start_lab(work, args.rollout_workers, args.rollout_controllers,
                            args.restart)
            try:
                for concurrency in args.concurrency:
                    _say(f"rollout at concurrency {concurrency}")
                    rollouts.append(bench_rollout(lab, work, concurrency, args.drain,
                                                  args.restart))
            finally:
                if not args.keep:
                    lab.down()
    finally:
        if fleet is not None:
            fleet.stop()
            if not args.keep:
                fleet.lab.down()
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"cargoship benchmark, {when}: {cores} CPU(s), load average (1/5 min) "
             f"{load_before} before, {load_average()} after, "
             f"{time.monotonic() - started:.0f} s in all",
             "plan hosts are reached through the latency proxy (tests/bench/proxy.py) at "
             "every latency, 0 ms included; bench labs run no Kubernetes API stand-in", ""]
    lines += [*plan_table(plans, ansible, cores), ""]
    lines += [*baseline_table(plans, ansible), ""]
    lines += [*round_trip_lines(plans), ""]
    lines += [*rollout_table(rollouts), ""]
    lines += ["Targets (issue 6):"] + [t.line() for t in targets(plans, ansible, rollouts,
                                                                  cores)]
    lines += ["Targets (issue 15):"] + [t.line() for t in targets_15(plans, ansible, startup,
                                                                      rollouts)]
    for failed_run in [p.run for p in plans if not p.ok] + [r.apply for r in rollouts
                                                           if r.apply.code != 0]:
        said = (failed_run.stderr.strip() or failed_run.stdout.strip()).splitlines()[-3:]
        notes.append(f"{' '.join(failed_run.argv[1:])} exited {failed_run.code}: "
                     + " / ".join(said))
    lines += [f"note: {n}" for n in notes]
    print("\n".join(lines))
    (work / "report.txt").write_text("\n".join(lines) + "\n")
    if not args.keep and args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    failed = [p for p in plans if not p.ok] + [r for r in rollouts if not r.ok]
    return 1 if failed else 0


def _settled(what: str, limit: float) -> str:
    waited = settle(limit=limit)
    how = "gave up" if waited >= limit else "settled"
    return (f"{what} began after {waited:.0f} s waiting for the machine to settle ({how}; "
            f"load average {load_average()} then)")


def _say(what: str) -> None:
    print(f"bench: {what}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
