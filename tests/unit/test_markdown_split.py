"""Markdown plans split into pull-request-comment-sized parts, each readable alone."""

from __future__ import annotations

from dataclasses import replace

from planner.plan.model import Change, HostRef, KeyChange, PhaseOutcome
from planner.render import COMMENT_LIMIT, View, render_markdown, split_markdown
from tests.unit.test_plan_codec import sample_plan

PHASE = "Sync Registry Config Worker"


def big_plan(hosts: int, diff_lines: int):  # type: ignore[no-untyped-def]
    """Each host with its own change (a different endpoint), so none are grouped."""
    def diff(h: int) -> str:
        return f"--- a\n+++ b\n+host {h}\n" + "".join(f"+line {i} " + "x" * 60 + "\n"
                                                     for i in range(diff_lines))
    changes = tuple(Change(HostRef(f"wrk-{h}", f"10.1.0.{h}"), PHASE, "write-file",
                           "/etc/rancher/rke2/registries.yaml", "b", "a", diff(h), True, True,
                           key_changes=(KeyChange(
                               "change", 'mirrors."docker.io".endpoint[0]', '"https://a"',
                               f'"https://m{h}"'),)) for h in range(hosts))
    return replace(sample_plan(), changes=changes,
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
        assert f"on wrk-{host}\n" in joined and f"+host {host}\n" in joined


def test_one_host_larger_than_a_comment_is_cut_and_reopened() -> None:
    text = render_markdown(big_plan(1, 2500), View(full=True))  # one diff of ~170 kB
    parts = split_markdown(text)
    assert len(parts) >= 3 and all(len(p) < COMMENT_LIMIT for p in parts)
    continued = [p for p in parts if "<details><summary>(continued)</summary>" in p]
    assert continued and all(p.count("```diff") >= 1 for p in continued)
    assert "+line 2499 " in parts[-1]
