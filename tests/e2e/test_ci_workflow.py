"""examples/ci/github-actions.yml works as written: its jobs' shell steps run here, in
order, as a runner would run them (bash -eo pipefail, the job's env, ${{ }} filled in,
$GITHUB_OUTPUT, $RUNNER_TEMP, step and job conditions), against lab hosts, with
tests/e2e/forge/gh.py standing in for the forge's `gh` and for upload-artifact. Only
`pip install cargoship` is skipped: this checkout's cargoship is on PATH instead.

The story: a pull request changes the mirror; the plan job finds nothing the pull request
may not change (tests/e2e/test_ci_workflow_hostile.py has pull requests that do), plans
and comments; two reviewers follow the signing comment as printed (download by run id,
show, sign detached, commit, push); their signature push runs the plan job again, which
keeps the plan; one signature is not enough for the apply job; after the merge, the apply
job finds the pull request's last plan run and applies that plan with two signatures from
the production environment's signers.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.cli import cargoship_argv, edit_config
from tests.lab import HostSpec, Lab

WORKFLOW = Path(__file__).resolve().parents[2] / "examples" / "ci" / "github-actions.yml"
GH = Path(__file__).resolve().parent / "forge" / "gh.py"
CONFIG = "clusters/prod-eu/cluster.yaml"
REGISTRIES = "/etc/rancher/rke2/registries.yaml"
NEW_MIRROR = "https://mirror2.lab.internal:5000"
REPOSITORY = "team/clusters"


def pr_event(workflow: dict[Any, Any]) -> str:
    """The event the workflow plans pull requests on (PyYAML reads the key `on` as True)."""
    triggers = workflow.get("on", workflow.get(True, {}))
    return "pull_request_target" if "pull_request_target" in triggers else "pull_request"


def pr_context(workflow: dict[str, Any], number: int) -> dict[str, str]:
    """What every plan job run of pull request NUMBER (a branch of REPOSITORY) sees."""
    return {"github.event_name": pr_event(workflow),
            "github.event.pull_request.number": str(number), "github.token": "t",
            "github.repository": REPOSITORY,
            "github.event.pull_request.head.repo.full_name": REPOSITORY,
            "github.event.pull_request.base.ref": "main"}


class Runner:
    def __init__(self, tmp: Path, repo: Path, workflow: Path = WORKFLOW) -> None:
        self.repo = repo
        self.forge = tmp / "forge"
        (self.forge / "artifacts").mkdir(parents=True)
        self.bin = tmp / "bin"
        self.bin.mkdir()
        (self.bin / "gh").write_text(f"#!/bin/sh\nexec {sys.executable} {GH} \"$@\"\n")
        (self.bin / "gh").chmod(0o755)
        # The runner's own home: its ~/.ssh is where a runner keeps its secrets.
        self.home = tmp / "runner-home"
        (self.home / ".ssh").mkdir(parents=True)
        self.workflow = yaml.safe_load(workflow.read_text())
        self.tmp = tmp

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        cargoship_dir = str(Path(cargoship_argv()[0]).parent)
        return {**os.environ, "FORGE_DIR": str(self.forge), "HOME": str(self.home),
                "PATH": f"{self.bin}:{cargoship_dir}:{os.environ['PATH']}",
                "GIT_AUTHOR_NAME": "ci", "GIT_AUTHOR_EMAIL": "ci@example.com",
                "GIT_COMMITTER_NAME": "ci", "GIT_COMMITTER_EMAIL": "ci@example.com",
                **(extra or {})}

    def run_job(self, name: str, context: dict[str, str], run_id: int) -> tuple[bool, str]:
        """Returns (succeeded, everything the steps printed)."""
        job = self.workflow["jobs"][name]
        temp = self.tmp / "runner-temp" / str(run_id)  # a fresh one per job, as on a runner
        temp.mkdir(parents=True)
        context = {**context, "github.run_id": str(run_id), "runner.temp": str(temp)}
        assert evaluate(job["if"], context, {}), f"job {name} would not run"
        env = self.env({"RUNNER_TEMP": str(temp),
                        **{k: fill(str(v), context) for k, v in job.get("env", {}).items()}})
        outputs: dict[str, dict[str, str]] = {}
        log = ""
        failed = False
        for step in job["steps"]:
            if "if" in step and not evaluate(step["if"], context, outputs, failed):
                continue
            if failed and "if" not in step:
                continue
            uses = step.get("uses", "")
            if uses.startswith("actions/checkout"):
                continue  # the test keeps the checkout in self.repo
            if uses.startswith("actions/upload-artifact"):
                spec = step["with"]
                source = self.repo / fill(spec["path"], context)
                target = self.forge / "artifacts" / str(run_id) / fill(spec["name"], context)
                target.mkdir(parents=True, exist_ok=True)
                if source.exists():
                    shutil.copy(source, target / source.name)
                continue
            script = fill(step["run"], context)
            if re.fullmatch(r"(python3 -m )?pip install cargoship", script.strip()):
                continue
            output = self.tmp / f"output-{run_id}-{len(log)}"
            output.write_text("")
            step_env = {**env, "GITHUB_OUTPUT": str(output),
                        **{k: fill(str(v), context) for k, v in step.get("env", {}).items()}}
            result = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c",
                                     script], cwd=self.repo, env=step_env, capture_output=True,
                                    text=True, timeout=300)
            log += f"--- {step.get('name', script[:40])}\n{result.stdout}{result.stderr}"
            assert "Traceback" not in result.stderr, result.stderr
            if "id" in step:
                outputs[step["id"]] = dict(line.split("=", 1) for line in
                                           output.read_text().splitlines() if "=" in line)
            if result.returncode != 0:
                failed = True
        return not failed, log

    def comments(self, pr: int) -> list[str]:
        folder = self.forge / "comments" / str(pr)
        return [p.read_text() for p in sorted(folder.iterdir())] if folder.exists() else []

    def set_forge(self, prs: list[dict[str, Any]], runs: list[dict[str, Any]]) -> None:
        (self.forge / "prs.json").write_text(json.dumps(prs))
        (self.forge / "runs.json").write_text(json.dumps(runs))


def fill(text: str, context: dict[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        expr = match.group(1).strip()
        assert expr in context, f"the test gives no value for ${{{{ {expr} }}}}"
        return context[expr]
    return re.sub(r"\$\{\{(.*?)\}\}", value, text)


def evaluate(condition: str, context: dict[str, str], outputs: dict[str, dict[str, str]],
             failed: bool = False) -> bool:
    """The conditions the workflow uses: always(), and `X == Y` terms joined by &&, each
    side a context value, a step's output or a 'literal'. A condition on a step's output,
    like GitHub's implicit success(), is false once a step failed."""
    condition = " ".join(condition.split())
    if condition == "always()":
        return True

    def side(expr: str) -> str | None:
        if expr.startswith("'") and expr.endswith("'"):
            return expr[1:-1]
        if expr.startswith("steps."):
            _, step, _, key = expr.split(".")
            return None if failed else outputs.get(step, {}).get(key)
        assert expr in context, f"the test gives no value for {expr}"
        return context[expr]

    for term in condition.split(" && "):
        match = re.fullmatch(r"(\S+) == (\S+)", term)
        assert match, f"unsupported condition {condition!r}"
        left, right = (side(e) for e in match.groups())
        if left is None or left != right:
            return False
    return True


def git(repo: Path, *args: str, env: dict[str, str]) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env=env).stdout.strip()


def reviewer(tmp: Path, name: str) -> tuple[Path, str]:
    home = tmp / name
    (home / ".ssh").mkdir(parents=True)
    key = home / ".ssh" / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{name}@example.com",
                    "-f", str(key)], check=True)
    public = key.with_name("id_ed25519.pub").read_text().split()
    return home, f"{name}@example.com {public[0]} {public[1]}"


def sign_as(runner: Runner, home: Path, howto: str) -> None:
    """A reviewer runs the signing comment's commands as printed."""
    block = howto.split("```\n", 1)[1].split("```", 1)[0]
    result = subprocess.run(["bash", "-eo", "pipefail", "-c", block], cwd=runner.repo,
                            env=runner.env({"HOME": str(home)}), capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Signed plan" in result.stdout


def test_the_pull_request_workflow_runs_as_written(lab_factory, tmp_path: Path) -> None:
    lab: Lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker")])
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["options"].update(
        readyTimeoutSeconds=20, drain={"timeoutSeconds": 10}))
    origin, repo = tmp_path / "origin.git", tmp_path / "repo"
    runner = Runner(tmp_path, repo)
    env = runner.env()
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], check=True)
    subprocess.run(["git", "clone", "-q", str(origin), str(repo)], check=True, env=env,
                   capture_output=True)
    (repo / "clusters" / "prod-eu").mkdir(parents=True)
    shutil.copy(lab.dir / "cluster.yaml", repo / CONFIG)
    reviewers = {name: reviewer(tmp_path, name) for name in ("alice", "bob")}
    homes = {name: home for name, (home, _) in reviewers.items()}
    # Who may approve: the production environment's variable, not a file of the repository.
    allowed_signers = "\n".join(line for _, line in reviewers.values())
    git(repo, "add", "-A", env=env)
    git(repo, "commit", "-qm", "The cluster as it is", env=env)
    git(repo, "push", "-q", "origin", "main", env=env)

    # The pull request: a second mirror, and credentials from the CI's secret.
    git(repo, "checkout", "-qb", "new-mirror", env=env)

    def change(data: dict[str, Any]) -> None:
        registries = data["spec"]["engineConfig"]["registries"]
        registries["mirrors"]["docker.io"]["endpoint"].append(NEW_MIRROR)
        registries["configs"] = {"mirror2.lab.internal:5000": {"auth": {
            "username": "ci", "password": {"fromEnv": "REGISTRY_PASSWORD"}}}}

    edit_config(repo / CONFIG, change)
    git(repo, "commit", "-qam", "A second mirror", env=env)
    git(repo, "push", "-q", "-u", "origin", "new-mirror", env=env)
    opened = git(repo, "rev-parse", "HEAD", env=env)
    pr = {**pr_context(runner.workflow, 7), "secrets.REGISTRY_PASSWORD": "s3cret-pw"}

    ok, log = runner.run_job("plan", {**pr, "github.event.action": "opened",
                                      "github.event.before": "",
                                      "github.event.pull_request.head.sha": opened}, 101)
    assert ok and "refused" not in log, log
    assert (runner.forge / "artifacts" / "101" / "cargoship-plan-pr-7" / "plan.json").exists()
    comments = runner.comments(7)
    assert len(comments) >= 2 and "s3cret-pw" not in "".join(comments)
    assert any(NEW_MIRROR in c for c in comments[:-1]), comments
    howto = comments[-1]
    assert "gh run download 101 -n cargoship-plan-pr-7" in howto

    # Two reviewers sign as the comment says; one commit and push each.
    sign_as(runner, homes["alice"], howto)
    after_alice = git(repo, "rev-parse", "HEAD", env=env)
    # Their pushes run the plan job again: cluster.yaml is unchanged, the plan is kept.
    ok, log = runner.run_job("plan", {**pr, "github.event.action": "synchronize",
                                      "github.event.before": opened,
                                      "github.event.pull_request.head.sha": after_alice}, 102)
    assert ok, log
    assert "keeping that plan" in log
    assert not (runner.forge / "artifacts" / "102").exists()
    assert len(runner.comments(7)) == len(comments)

    runs = [{"databaseId": run, "workflow": "cargoship", "event": pr_event(runner.workflow),
             "branch": "new-mirror", "status": "success"} for run in (102, 101)]
    push = {"github.event_name": "push", "github.token": "t",
            "secrets.REGISTRY_PASSWORD": "s3cret-pw",
            "vars.CARGOSHIP_ALLOWED_SIGNERS": allowed_signers}

    # One signature is not enough: the apply job refuses and nothing changes.
    git(repo, "checkout", "-q", "main", env=env)
    git(repo, "merge", "-q", "--no-ff", "new-mirror", "-m", "Merge #7", env=env)
    early = git(repo, "rev-parse", "HEAD", env=env)
    runner.set_forge([{"number": 7, "headRefName": "new-mirror", "state": "merged",
                       "commits": [early]}], runs)
    ok, log = runner.run_job("apply", {**push, "github.sha": early}, 103)
    assert not ok and "1 valid signature(s)" in log and "2 required" in log, log
    assert NEW_MIRROR not in lab.exec("ctl-1", f"cat {REGISTRIES}").stdout
    git(repo, "reset", "-q", "--hard", "origin/main", env=env)

    git(repo, "checkout", "-q", "new-mirror", env=env)
    sign_as(runner, homes["bob"], howto)
    signatures = sorted((repo / "clusters" / "prod-eu" / "signatures").iterdir())
    assert len(signatures) == 2 and all(p.stat().st_size < 2048 for p in signatures)
    ok, log = runner.run_job("plan", {**pr, "github.event.action": "synchronize",
                                      "github.event.before": after_alice,
                                      "github.event.pull_request.head.sha":
                                          git(repo, "rev-parse", "HEAD", env=env)}, 104)
    assert ok and "keeping that plan" in log, log

    # The merge: the apply job finds run 101 (the last run that planned) and applies it.
    git(repo, "checkout", "-q", "main", env=env)
    git(repo, "merge", "-q", "--no-ff", "new-mirror", "-m", "Merge #7", env=env)
    merged = git(repo, "rev-parse", "HEAD", env=env)
    runs.insert(0, {**runs[0], "databaseId": 104})
    runner.set_forge([{"number": 7, "headRefName": "new-mirror", "state": "merged",
                       "commits": [merged]}], runs)
    ok, log = runner.run_job("apply", {**push, "github.sha": merged}, 105)
    assert ok, log
    assert "plan of pull request #7, run 101" in log
    assert "Signed by alice@example.com, bob@example.com: accepted" in log
    for host in ("ctl-1", "wrk-1"):
        assert NEW_MIRROR in lab.exec(host, f"cat {REGISTRIES}").stdout
    record = runner.forge / "artifacts" / "105" / "cargoship-apply-record" / "plan.applied.json"
    assert json.loads(record.read_text())["ok"] is True
    shutil.rmtree("/tmp/cargoship-plan-101", ignore_errors=True)
