"""examples/ci/github-actions.yml does not trust the pull request it plans. Its steps run
as tests/e2e/test_ci_workflow.py runs them (bash, the job's env, ${{ }} filled in, the
stand-in `gh`), for a pull request written by someone who wants more than a review:

- its author adds their own key to the team's .cargoship/allowed_signers and signs the
  plan with it, beside one real reviewer: the plan job refuses that push, and after the
  merge the apply job refuses the plan (one signature from the production environment's
  signers, two required); the hosts keep their config;
- its cluster.yaml has the runner log in with a key of the runner's own (an absolute path,
  a relative one out of the checkout, one through a profile), trust a known_hosts file of
  its own, or it changes the workflow: the plan job refuses in one line, before any host
  is contacted, and keeps no plan.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cli import edit_config
from tests.e2e.test_ci_workflow import (
    CONFIG,
    NEW_MIRROR,
    REGISTRIES,
    Runner,
    git,
    pr_context,
    pr_event,
    reviewer,
    sign_as,
)
from tests.lab import HostSpec, Lab

pytestmark = pytest.mark.reliability("trust: a pull request's workflow does not trust the PR")

CHECK = "Refuse what a pull request may not change"


def main_branch(tmp: Path, lab: Lab, signers: list[str]) -> tuple[Runner, Path, dict[str, str]]:
    """origin's main holds the lab's cluster.yaml and the team's copy of its signers; the
    runner's own ~/.ssh holds a key that logs in to the lab's hosts (a runner's secret)."""
    origin, repo = tmp / "origin.git", tmp / "repo"
    runner = Runner(tmp, repo)
    env = runner.env()
    shutil.copy(lab.dir / "id_ed25519", runner.home / ".ssh" / "id_ed25519")
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], check=True)
    subprocess.run(["git", "clone", "-q", str(origin), str(repo)], check=True, env=env,
                   capture_output=True)
    (repo / "clusters" / "prod-eu").mkdir(parents=True)
    shutil.copy(lab.dir / "cluster.yaml", repo / CONFIG)
    (repo / ".cargoship").mkdir()
    (repo / ".cargoship" / "allowed_signers").write_text("".join(f"{s}\n" for s in signers))
    git(repo, "add", "-A", env=env)
    git(repo, "commit", "-qm", "The cluster as it is", env=env)
    git(repo, "push", "-q", "origin", "main", env=env)
    return runner, repo, env


def add_mirror(data: dict[str, Any]) -> None:
    data["spec"]["engineConfig"]["registries"]["mirrors"]["docker.io"]["endpoint"].append(
        NEW_MIRROR)


def step_output(log: str, step: str) -> list[str]:
    """The lines one step printed, from run_job's log."""
    section = log.split(f"--- {step}\n", 1)[1]
    return section.split("\n--- ", 1)[0].splitlines()


def test_signers_a_pull_request_adds_do_not_count(lab_factory: Callable[..., Lab],
                                                  tmp_path: Path) -> None:
    lab: Lab = lab_factory([HostSpec("ctl-1", "controller")])
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["options"].update(
        readyTimeoutSeconds=20, drain={"timeoutSeconds": 10}))
    team = {name: reviewer(tmp_path, name) for name in ("alice", "bob")}
    mallory_home, mallory = reviewer(tmp_path, "mallory")
    runner, repo, env = main_branch(tmp_path, lab, [line for _, line in team.values()])
    pr = {**pr_context(runner.workflow, 8), "secrets.REGISTRY_PASSWORD": "unused"}
    try:
        git(repo, "checkout", "-qb", "more-mirrors", env=env)
        edit_config(repo / CONFIG, add_mirror)
        git(repo, "commit", "-qam", "A second mirror", env=env)
        git(repo, "push", "-q", "-u", "origin", "more-mirrors", env=env)
        opened = git(repo, "rev-parse", "HEAD", env=env)
        ok, log = runner.run_job("plan", {**pr, "github.event.action": "opened",
                                          "github.event.before": "",
                                          "github.event.pull_request.head.sha": opened}, 201)
        assert ok, log
        howto = runner.comments(8)[-1]
        outcomes: dict[int, bool] = {201: ok}

        # One real reviewer signs; the plan job keeps the plan.
        sign_as(runner, team["alice"][0], howto)
        after_alice = git(repo, "rev-parse", "HEAD", env=env)
        ok, log = runner.run_job("plan", {**pr, "github.event.action": "synchronize",
                                          "github.event.before": opened,
                                          "github.event.pull_request.head.sha": after_alice},
                                 202)
        assert ok and "keeping that plan" in log, log
        outcomes[202] = ok

        # The author makes themself a signer and signs: that push is refused.
        with (repo / ".cargoship" / "allowed_signers").open("a") as signers:
            signers.write(f"{mallory}\n")
        git(repo, "commit", "-qam", "Add a signer", env=env)
        comments = len(runner.comments(8))
        sign_as(runner, mallory_home, howto)
        ok, log = runner.run_job("plan", {**pr, "github.event.action": "synchronize",
                                          "github.event.before": after_alice,
                                          "github.event.pull_request.head.sha":
                                              git(repo, "rev-parse", "HEAD", env=env)}, 203)
        outcomes[203] = ok
        assert not ok, log
        assert step_output(log, CHECK) == [
            "refused: this pull request makes .cargoship/allowed_signers differ from main's; "
            "trust files change on main, by the people who administer it"], log
        assert len(runner.comments(8)) == comments

        # Merged anyway (an admin overrode the failed check): the apply job counts only
        # the production environment's signers, whatever the merged tree says.
        git(repo, "checkout", "-q", "main", env=env)
        git(repo, "merge", "-q", "--no-ff", "more-mirrors", "-m", "Merge #8", env=env)
        merged = git(repo, "rev-parse", "HEAD", env=env)
        runs = [{"databaseId": run, "workflow": "cargoship", "event": pr_event(runner.workflow),
                 "branch": "more-mirrors", "status": "success" if outcomes[run] else "failure"}
                for run in sorted(outcomes, reverse=True)]
        runner.set_forge([{"number": 8, "headRefName": "more-mirrors", "state": "merged",
                           "commits": [merged]}], runs)
        ok, log = runner.run_job("apply", {
            "github.event_name": "push", "github.token": "t", "github.sha": merged,
            "vars.CARGOSHIP_ALLOWED_SIGNERS": "\n".join(line for _, line in team.values()),
            "secrets.REGISTRY_PASSWORD": "unused"}, 204)
        assert not ok, log
        assert "plan of pull request #8, run 201" in log
        assert "has 1 valid signature(s)" in log and "2 required" in log, log
        assert NEW_MIRROR not in lab.exec("ctl-1", f"cat {REGISTRIES}").stdout
    finally:
        shutil.rmtree("/tmp/cargoship-plan-201", ignore_errors=True)


Edit = Callable[[dict[str, Any]], None]
Change = Callable[[Runner, Path, Lab], Edit]  # changes files beside cluster.yaml; its edit


def key_of_the_runner(absolute: bool) -> Change:
    """hosts[0] logs in with the runner's own key: /…/runner-home/.ssh/id_ed25519, or the
    same file as ../../../runner-home/.ssh/id_ed25519 from clusters/prod-eu/."""
    def change(runner: Runner, repo: Path, lab: Lab) -> Edit:
        key = runner.home / ".ssh" / "id_ed25519"
        path = str(key) if absolute else str(Path("../../..") / key.relative_to(runner.tmp))
        return lambda data: data["spec"]["hosts"][0]["ssh"].update(keyPath=path)
    return change


def key_through_a_profile(runner: Runner, repo: Path, lab: Lab) -> Edit:
    def edit(data: dict[str, Any]) -> None:
        data["spec"]["profiles"] = {"edge": {"ssh": {"keyPath": "~/.ssh/id_ed25519"}}}
        data["spec"]["hosts"][0]["profile"] = "edge"
        del data["spec"]["hosts"][0]["ssh"]["keyPath"]
    return edit


def known_hosts_of_its_own(runner: Runner, repo: Path, lab: Lab) -> Edit:
    # A copy of the real one, so that today's workflow plans with it all the same.
    shutil.copy(lab.dir / "known_hosts", repo / "clusters" / "prod-eu" / "known_hosts")

    def edit(data: dict[str, Any]) -> None:
        for host in data["spec"]["hosts"]:
            host["ssh"]["knownHosts"] = "known_hosts"
    return edit


def a_workflow_of_its_own(runner: Runner, repo: Path, lab: Lab) -> Edit:
    (repo / ".github" / "workflows").mkdir(parents=True)
    (repo / ".github" / "workflows" / "cargoship.yml").write_text("name: cargoship\n")
    return add_mirror


WOULD_USE = f"refused: {CONFIG}: spec.hosts[0] would have the plan use"


@pytest.mark.parametrize("change, refusal", [
    (key_of_the_runner(absolute=True), f"{WOULD_USE} SSH key {{home}}/.ssh/id_ed25519, "),
    (key_of_the_runner(absolute=False), f"{WOULD_USE} SSH key clusters/prod-eu/../../../"
                                        "runner-home/.ssh/id_ed25519, "),
    (key_through_a_profile, f"{WOULD_USE} SSH key {{home}}/.ssh/id_ed25519, "),
    (known_hosts_of_its_own, f"{WOULD_USE} known_hosts file clusters/prod-eu/known_hosts, "),
    (a_workflow_of_its_own,
     "refused: this pull request makes .github/workflows/cargoship.yml differ from main's"),
], ids=["absolute-key", "relative-key", "profile-key", "own-known-hosts", "own-workflow"])
def test_the_plan_job_refuses_a_pull_request_that_reaches_for_the_runner(
        healthy_lab: Lab, tmp_path: Path, change: Change, refusal: str) -> None:
    runner, repo, env = main_branch(tmp_path, healthy_lab, [])
    git(repo, "checkout", "-qb", "hostile", env=env)
    edit_config(repo / CONFIG, change(runner, repo, healthy_lab))
    git(repo, "add", "-A", env=env)
    git(repo, "commit", "-qm", "Nothing to see", env=env)
    git(repo, "push", "-q", "-u", "origin", "hostile", env=env)
    head = git(repo, "rev-parse", "HEAD", env=env)
    ok, log = runner.run_job("plan", {**pr_context(runner.workflow, 9),
                                      "secrets.REGISTRY_PASSWORD": "unused",
                                      "github.event.action": "opened",
                                      "github.event.before": "",
                                      "github.event.pull_request.head.sha": head}, 301)
    assert not ok, log
    lines = step_output(log, CHECK)
    assert len(lines) == 1 and lines[0].startswith(refusal.format(home=runner.home)), log
    # Refused before any host was contacted: the plan step never ran, nothing was kept.
    assert "--- Plan, unless" not in log
    assert not (runner.forge / "artifacts" / "301").exists()
    assert runner.comments(9) == []
