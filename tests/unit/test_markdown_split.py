"""Markdown plans split into pull-request-comment-sized parts, each readable alone."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from planner.config.model import ClusterConfig, Engine
from planner.desired.compare import shown_desired
from planner.desired.engine_files import desired_files
from planner.plan.model import Change, HostIdentity, HostRef, KeyChange, PhaseOutcome
from planner.render import COMMENT_LIMIT, View, render_markdown, split_markdown
from tests.unit.test_plan_codec import sample_plan

PHASE = "Sync Registry Config Worker"


def big_plan(hosts: int, mirrors: int):  # type: ignore[no-untyped-def]
    """Each host with its own change (another old file), so none are grouped; a valid plan
    (its diffs are what its desired state renders), `mirrors` long mirrors in it."""
    base = sample_plan()
    desired = {**base.desired, "engineConfig": {"registries": {"mirrors": {
        f"line-{i}.example": {"endpoint": ["https://" + "x" * 60]} for i in range(mirrors)}}}}
    plan = replace(base, desired=desired)
    [wanted] = desired_files(ClusterConfig(
        path=Path("<plan>"), name=plan.cluster, hosts=(),
        engine=Engine("rke2", "v1.30.4+rke2r1"), engine_config=desired["engineConfig"]),
        "worker")
    new = shown_desired(wanted).splitlines()
    path = "/etc/rancher/rke2/registries.yaml"

    def diff(h: int) -> str:
        return (f"--- {path} (live)\n+++ {path} (desired)\n@@ -1 +1,{len(new)} @@\n"
                f"-host {h}\n" + "".join(f"+{line}\n" for line in new))
    refs = [HostRef(f"wrk-{h}", f"10.1.0.{h}") for h in range(hosts)]
    identities = tuple(HostIdentity(r.name, r.address, 22, "worker", None, None, None, None,
                                    None) for r in refs)
    # What the desired state holds (a plan's key changes are verified like its diffs).
    first = KeyChange("add", 'mirrors."line-0.example".endpoint[0]', None,
                      '"https://' + "x" * 60 + '"')
    changes = tuple(Change(ref, PHASE, "write-file", path, "b", "a", diff(h), True, True,
                           key_changes=(first,)) for h, ref in enumerate(refs))
    return replace(plan, hosts=identities, changes=changes, unassessed=(),
                   phases=(PhaseOutcome(8, PHASE, "reported, not run", "planned"),))


def test_small_plans_stay_whole() -> None:
    text = render_markdown(big_plan(2, 5))
    assert split_markdown(text) == [text]


def test_big_plans_split_under_the_limit_with_balanced_blocks() -> None:
    text = render_markdown(big_plan(60, 40), View(diff=True))  # ~170 kB
    parts = split_markdown(text)
    assert len(parts) >= 3
    for number, part in enumerate(parts, 1):
        assert len(part) < COMMENT_LIMIT
        assert part.startswith(f"_cargoship plan, part {number} of {len(parts)}_")
        assert part.count("```") % 2 == 0
        assert part.count("<details>") == part.count("</details>")
    joined = "".join(parts)
    for host in range(60):
        assert f"on wrk-{host}\n" in joined and f"-host {host}\n" in joined


def test_one_host_larger_than_a_comment_is_cut_and_reopened() -> None:
    text = render_markdown(big_plan(1, 2000), View(full=True))  # one diff of ~170 kB
    parts = split_markdown(text)
    assert len(parts) >= 3 and all(len(p) < COMMENT_LIMIT for p in parts)
    continued = [p for p in parts if "<details><summary>(continued)</summary>" in p]
    assert continued and all(p.count("```diff") >= 1 for p in continued)
    assert "+  line-999.example:" in parts[-1]
