"""`plan --stats`: what a run cost, per phase: remote commands per host and time; then
the process's CPU time and peak memory. The benchmark (tests/bench) reads these lines."""

from __future__ import annotations

import resource
import sys

from planner.dryrun import DryRunReport


def render_stats(report: DryRunReport) -> str:
    ctx = report.ctx
    lines = ["Stats: remote command round trips per host, by phase",
             f"  {'#':>2} {'phase':<46} {'hosts':>5} {'max/host':>8} {'total':>6} "
             f"{'seconds':>8}"]
    worst = 0
    for record in report.phases:
        per_host = ctx.round_trips.get(record.title, {})
        most = max(per_host.values(), default=0)
        worst = max(worst, most)
        lines.append(f"  {record.number:>2} {record.title[:46]:<46} {len(per_host):>5} "
                     f"{most:>8} {sum(per_host.values()):>6} {record.seconds:>8.3f}")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    # ru_maxrss is in KiB on Linux, bytes on macOS.
    rss_mib = usage.ru_maxrss / (1 << 20 if sys.platform == "darwin" else 1 << 10)
    lines.append(f"  max round trips per host per phase: {worst}")
    if ctx.startup is not None:
        lines.append(f"  start-up before the first dial: {ctx.startup.wall:.3f} s wall, "
                     f"{ctx.startup.cpu:.3f} s CPU (from process start)")
    if ctx.loaded is not None:
        lines.append(f"  start-up to the phases loaded: {ctx.loaded.wall:.3f} s wall, "
                     f"{ctx.loaded.cpu:.3f} s CPU (from process start; the imports made "
                     "during the handshakes included, the handshakes' CPU not)")
    lines.append(f"  hosts: {len(ctx.hosts)}, phases: {report.seconds:.3f} s wall, process: "
                 f"{usage.ru_utime + usage.ru_stime:.3f} s CPU, {rss_mib:.1f} MiB peak RSS")
    return "\n".join(lines) + "\n"
