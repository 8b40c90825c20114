"""6. Gathering facts about the distro installed: engine present? which version? running?

The version decides install vs upgrade vs no-op, and a downgrade is refused here, before
any run could start one.
"""

from __future__ import annotations

from ..context import PlanContext
from ..facts.distro import LAYOUTS, EngineFacts, engine_fact
from ..facts.engine_version import EngineVersion
from .base import DryRun, Phase


class GatherDistroFacts(Phase):
    title = "Gathering facts about the distro installed"
    dry_run = DryRun.RUNS_READ_ONLY

    def run(self, ctx: PlanContext) -> None:
        engine = ctx.config.engine
        layout = LAYOUTS[engine.distro]
        pinned = EngineVersion.parse(engine.version)
        # Hosts without root access already dropped out in Validate hosts.
        gathered = ctx.gather(
            self.title,
            lambda h: [engine_fact(layout, h.config.role, h.init_system or "unknown")],
            as_root=True,
        )
        for host, (facts,) in gathered:
            host.engine = facts
            verdict, problem = _compare(facts, pinned, engine.distro)
            if problem:
                ctx.fail_host(self.title, host, problem)
            else:
                ctx.found(self.title, host, verdict)


def _compare(facts: EngineFacts, pinned: EngineVersion, distro: str) -> tuple[str, str | None]:
    if facts.other_distro:
        return "", (f"{facts.other_distro} is installed but the config pins {distro}; "
                    "switching engines is not something cargoship does")
    if not facts.installed:
        return f"{distro} not installed: would install {pinned}", None
    if facts.version is None:
        return "", f"{distro} at {facts.binary}: {facts.version_error}"
    state = f"service {facts.service_state}"
    if facts.version > pinned:
        return "", (f"{distro} {facts.version} is newer than the pinned {pinned}: "
                    "downgrades are refused")
    if facts.version < pinned:
        return f"{distro} {facts.version} installed, {state}: upgrade to {pinned}", None
    return f"{distro} {facts.version} installed (as pinned), {state}", None
