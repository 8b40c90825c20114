"""The benchmark's tables, and each target of issues 6 and 15 judged from the figures."""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from .ansible import AnsibleResult
from .plans import PlanResult, StartupResult
from .rollout import RolloutResult

RSS_LIMIT_MIB = 250e6 / (1 << 20)  # 250 MB


@dataclass(frozen=True)
class Target:
    name: str
    met: bool | None  # None: not measured in this run
    detail: str

    def line(self) -> str:
        mark = {True: "MET ", False: "MISS", None: "n/a "}[self.met]
        return f"  [{mark}] {self.name}: {self.detail}"


def plan_table(plans: Sequence[PlanResult], ansible: Sequence[AnsibleResult],
               cores: int) -> list[str]:
    by_key = {(a.size, a.delay_ms): a for a in ansible}
    lines = ["Plan: `cargoship plan --stats` (median run by wall time; range of walls) vs "
             "`ansible-playbook --check --diff`",
             f"  {'hosts':>5} {'one-way':>7} | {'wall s':>6} {'(range)':>11} {'CPU s':>6} "
             f"{'RSS MiB':>7} {'RT/host/phase':>13} {'hosts CPU s':>11} {'floor s':>7} | "
             f"{'ansible wall s':>14} {'CPU s':>6} {'RSS MiB':>7} | {'ratio':>6}"]
    for p in plans:
        a = by_key.get((p.size, p.delay_ms))
        status = "" if p.ok else f"  (plan exit {p.run.code})"
        if a is None:
            theirs = f"{'-':>14} {'-':>6} {'-':>7} | {'-':>6}"
        else:
            failed = "" if a.ok else "!"
            theirs = (f"{a.run.wall:>13.2f}{failed or ' '} {a.run.cpu:>6.2f} "
                      f"{a.run.rss_mib:>7.1f} | {a.run.wall / p.run.wall:>5.1f}x")
        floor = (p.run.cpu + p.hosts_cpu) / cores
        lines.append(
            f"  {p.size:>5} {p.delay_ms:>4g} ms | {p.run.wall:>6.2f} {p.spread:>11} "
            f"{p.run.cpu:>6.2f} {p.run.rss_mib:>7.1f} {p.max_round_trips:>13} "
            f"{p.hosts_cpu:>11.2f} {floor:>7.2f} | {theirs}{status}")
    if any(not a.ok for a in ansible):
        lines.append("  (!: ansible-playbook exited non-zero; see its log in the work dir)")
    lines.append("  hosts CPU = what the lab hosts' sshd and the plan's remote scripts used on "
                 "this same machine; floor = (CPU + hosts CPU) / cores: the wall time no "
                 "client could beat here")
    return lines


def baseline_table(plans: Sequence[PlanResult], ansible: Sequence[AnsibleResult]) -> list[str]:
    """cargoship against the minimal client (baseline.py), run for run, and Ansible."""
    by_key = {(a.size, a.delay_ms): a for a in ansible}
    lines = ["Plan vs the baseline client (paramiko, one thread and one exec per host, the "
             "same hosts and proxy, interleaved; median runs)",
             f"  {'hosts':>5} {'one-way':>7} | {'plan s':>6} {'base s':>6} {'wall x':>6} | "
             f"{'plan CPU':>8} {'base CPU':>8} {'CPU x':>5} | {'ansible/plan':>12}"]
    for p in plans:
        b = p.baseline
        a = by_key.get((p.size, p.delay_ms))
        vs_ansible = f"{a.run.wall / p.run.wall:>11.1f}x" if a else f"{'-':>12}"
        failed = "" if b.code == 0 else f"  (baseline exit {b.code}: {b.stdout.strip()})"
        lines.append(f"  {p.size:>5} {p.delay_ms:>4g} ms | {p.run.wall:>6.2f} {b.wall:>6.2f} "
                     f"{p.run.wall / b.wall:>5.2f}x | {p.run.cpu:>8.2f} {b.cpu:>8.2f} "
                     f"{p.run.cpu / b.cpu:>4.1f}x | {vs_ansible}{failed}")
    return lines


def round_trip_lines(plans: Sequence[PlanResult]) -> list[str]:
    if not plans:
        return []
    biggest = max(plans, key=lambda p: (p.size, p.delay_ms))
    lines = [f"Round trips per host by phase ({biggest.size} hosts, {biggest.delay_ms:g} ms; "
             "counted by the host layer, remote commands after connecting):"]
    lines += [f"  {count}  {phase}" for phase, count in biggest.per_phase.items()]
    return lines


def rollout_table(results: Sequence[RolloutResult]) -> list[str]:
    if not results:
        return []
    first = results[0]
    lines = [f"Apply rollout: {first.controllers} controller(s) + {first.workers} workers, "
             f"drain {first.drain:g} s + restart {first.restart:g} s per node",
             f"  {'workers at once':>15} | {'ideal s':>7} {'rollout s':>9} {'vs ideal':>8} | "
             f"{'apply s':>7} {'overhead/node s':>15}"]
    for r in results:
        status = "" if r.ok else f"  (apply exit {r.apply.code})"
        lines.append(f"  {r.concurrency:>15} | {r.ideal:>7.2f} {r.rollout:>9.2f} "
                     f"{(r.rollout_ratio - 1) * 100:>+7.1f}% | {r.apply.wall:>7.2f} "
                     f"{r.overhead_per_node:>15.3f}{status}")
    lines.append("  ideal = (controllers + ceil(workers / c)) x (drain + restart); overhead/node "
                 "= (apply wall - ideal) / nodes, so it includes connect, lock, drift check, "
                 "records")
    return lines


def targets_15(plans: Sequence[PlanResult], ansible: Sequence[AnsibleResult],
               startup: StartupResult | None,
               rollouts: Sequence[RolloutResult] = ()) -> list[Target]:
    """Issue 15: within 1.5x of the baseline client, 25x Ansible, CPU per host, start-up,
    and the rollout: per-host overhead and the whole against its ideal."""
    out: list[Target] = []
    at20 = {p.size: p for p in plans if p.delay_ms == 20}
    for size in (10, 100):
        p = at20.get(size)
        ratio = p.run.wall / p.baseline.wall if p else None
        out.append(Target(f"plan wall within 1.5x of the baseline client, {size} hosts at 20 ms",
                          None if ratio is None else ratio <= 1.5 and p is not None and p.ok,
                          f"{ratio:.2f}x" if ratio else "not run"))
    by_key = {(p.size, p.delay_ms): p for p in plans}
    a100 = [a for a in ansible if a.size == 100 and (a.size, a.delay_ms) in by_key]
    shown = [(a.delay_ms, a.run.wall / by_key[(a.size, a.delay_ms)].run.wall) for a in a100]
    out.append(Target("plan at least 25x faster than Ansible at 100 hosts",
                      None if not shown else all(r >= 25 for _, r in shown),
                      ", ".join(f"{d:g} ms: {r:.1f}x" for d, r in shown) or "not run"))
    p100 = at20.get(100) or max(plans, key=lambda p: p.size, default=None)
    if p100 is not None and startup is not None:
        per_host = (p100.run.cpu - startup.loaded.cpu) / p100.size * 1000
        # As earlier passes counted it: the imports after the first dial as per-host CPU.
        dial_based = (p100.run.cpu - startup.first_dial.cpu) / p100.size * 1000
        out.append(Target("client CPU per host beyond start-up at most 5 ms", per_host <= 5,
                          f"{per_host:.1f} ms ({p100.size} hosts, {p100.delay_ms:g} ms: "
                          f"{p100.run.cpu:.2f} s CPU - {startup.loaded.cpu:.2f} s start-up; "
                          f"{dial_based:.1f} ms with start-up cut at the first dial)"))
    big = [p for p in plans if p.size >= 500]
    rss = max((p.run.rss_mib for p in big), default=None)
    out.append(Target("500 hosts, peak RSS at most 200 MB", None if rss is None else
                      rss <= 200e6 / (1 << 20) and all(p.ok for p in big),
                      f"{rss:.1f} MiB" if rss else "not run (--sizes ...,500)"))
    out.append(Target("start-up (imports) of `plan` at most 0.3 s", None if startup is None
                      else startup.loaded.wall <= 0.3,
                      f"{startup.loaded.wall:.2f} s wall, {startup.loaded.cpu:.2f} s CPU "
                      "(process start to the phases loaded; to the first dial: "
                      f"{startup.first_dial.wall:.2f} s wall, {startup.first_dial.cpu:.2f} s CPU)"
                      if startup else "not run"))
    spans = [r for r in rollouts if r.spans]
    out.append(Target("rollout overhead per node outside the drain and restart waits at most "
                      "0.3 s", None if not spans else all(
                          r.ok and statistics.mean(r.host_overheads) <= 0.3 for r in spans),
                      ", ".join(f"c={r.concurrency}: mean {statistics.mean(r.host_overheads):.3f}"
                                f" s, max {max(r.host_overheads):.3f} s" for r in spans)
                      or "not run"))
    out.append(Target("rollout within 10 % of the ideal at concurrency 1, 4 and 8",
                      None if not rollouts else all(r.ok and r.rollout_ratio <= 1.10
                                                    for r in rollouts),
                      ", ".join(f"c={r.concurrency}: {(r.rollout_ratio - 1) * 100:+.1f}%"
                                for r in rollouts) or "not run"))
    return out


def targets(plans: Sequence[PlanResult], ansible: Sequence[AnsibleResult],
            rollouts: Sequence[RolloutResult], cores: int) -> list[Target]:
    out: list[Target] = []
    worst = max((p.max_round_trips for p in plans), default=None)
    out.append(Target("at most 1 remote command round trip per host per phase",
                      None if worst is None else (worst == 1 and all(p.ok for p in plans)),
                      f"max {worst}"))
    at20 = {p.size: p for p in plans if p.delay_ms == 20}
    p100 = at20.get(100)
    out.append(Target("plan, 100 hosts at 20 ms one-way, under 3 s wall",
                      None if p100 is None else p100.run.wall < 3.0 and p100.ok,
                      f"{p100.run.wall:.2f} s" if p100 else "not run"))
    sizes = sorted(at20)
    if len(sizes) >= 3:
        marginal = [(at20[b].run.cpu - at20[a].run.cpu) / (b - a) * 1000
                    for a, b in itertools.pairwise(sizes)]
        shown = ", ".join(f"{a}->{b}: {m:.1f} ms" for (a, b), m in
                          zip(itertools.pairwise(sizes), marginal, strict=True))
        out.append(Target("CPU no faster than linear (CPU per added host does not grow, "
                          "within 50 % noise)", marginal[-1] <= 1.5 * max(marginal[0], 1.0),
                          f"CPU per added host at 20 ms: {shown}"))
        small = at20[sizes[0]]
        flat = [at20[n].run.wall <= 1.5 * small.run.wall + at20[n].run.cpu / cores
                for n in sizes]
        out.append(Target("wall flat-ish until CPU-bound (wall <= 1.5 x smallest + CPU / "
                          f"{cores} cores)", all(flat),
                          ", ".join(f"{n}: {at20[n].run.wall:.2f} s" for n in sizes)))
    big = [p for p in plans if p.size >= 200]
    rss = max((p.run.rss_mib for p in big), default=None)
    out.append(Target("200 hosts, peak RSS under 250 MB", None if rss is None else
                      rss < RSS_LIMIT_MIB, f"{rss:.1f} MiB" if rss else "not run"))
    by_key = {(p.size, p.delay_ms): p for p in plans}
    ratios = [(a.size, a.delay_ms, a.run.wall / by_key[(a.size, a.delay_ms)].run.wall)
              for a in ansible if (a.size, a.delay_ms) in by_key]
    out.append(Target("plan at least 10x faster than Ansible on the same hosts",
                      None if not ratios else all(r >= 10 for _, _, r in ratios)
                      and all(a.ok for a in ansible),
                      ", ".join(f"{n}@{d:g}ms {r:.1f}x" for n, d, r in ratios) or "not run"))
    out.append(Target("apply overhead outside drain/restart under 0.5 s per node",
                      None if not rollouts else all(r.ok and r.overhead_per_node < 0.5
                                                    for r in rollouts),
                      ", ".join(f"c={r.concurrency}: {r.overhead_per_node:.3f} s"
                                for r in rollouts) or "not run"))
    out.append(Target("rollout wall within 10 % of the ideal at every concurrency",
                      None if not rollouts else all(r.ok and r.rollout_ratio <= 1.10
                                                    for r in rollouts),
                      ", ".join(f"c={r.concurrency}: {(r.rollout_ratio - 1) * 100:+.1f}%"
                                for r in rollouts) or "not run"))
    return out
