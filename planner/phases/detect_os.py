"""2. Detect host operating systems: os-release, kernel and init system; pick a configurer."""

from __future__ import annotations

from typing import Any

from ..configurers import UnsupportedOs, pick
from ..context import HostState, PlanContext
from ..facts.os_release import INIT_SYSTEM, KERNEL, OS_RELEASE
from ..hosts.batch import Fact
from .base import DryRun, Phase

FACTS: list[Fact[Any]] = [OS_RELEASE, KERNEL, INIT_SYSTEM]


class DetectOs(Phase):
    title = "Detect host operating systems"
    dry_run = DryRun.RUNS_READ_ONLY

    def prefetch(self, ctx: PlanContext, host: HostState) -> list[tuple[Fact[Any], bool]]:
        return [(fact, False) for fact in FACTS]

    def run(self, ctx: PlanContext) -> None:
        for host, (release, kernel, init) in ctx.gather(self.title, lambda _: FACTS):
            host.os, host.kernel, host.init_system = release, kernel, init
            try:
                host.configurer = pick(release)
            except UnsupportedOs as exc:
                ctx.fail_host(self.title, host, str(exc))
                continue
            ctx.found(self.title, host,
                      f"{release.pretty_name} ({host.configurer.describe()}), "
                      f"{kernel.name} {kernel.release} {kernel.machine}, init {init}")
