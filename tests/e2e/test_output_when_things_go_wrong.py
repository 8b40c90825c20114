"""Output that stays true and readable when things go wrong (issue 29), through the command
on lab hosts: partial reachability said, failure reasons a person can read, refusals that
lead with the deciding reason, true counts, and the small things around them."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from tests.e2e.cli import cargoship, cargoship_argv, edit_config
from tests.e2e.test_completion import bash_complete, script
from tests.e2e.test_machine_interface import conforms
from tests.e2e.test_rollout_fidelity import refused_audit_policy
from tests.e2e.test_signing import allowed, key
from tests.lab import HostSpec, Lab

K3S_REGISTRIES = "/etc/rancher/k3s/registries.yaml"
NEW_MIRROR = "https://mirror2.lab.internal:5000"


def k3s_lab(lab_factory, workers: int = 3, **options: object) -> Lab:  # type: ignore[no-untyped-def]
    specs = [HostSpec("ctl-1", "controller")]
    specs += [HostSpec(f"wrk-{i}", "worker") for i in range(1, workers + 1)]
    lab = lab_factory(specs, distro="k3s")
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["options"].update(
        readyTimeoutSeconds=30, drain={"timeoutSeconds": 10},
        ssh={"connectTimeoutSeconds": 1, "commandTimeoutSeconds": 10}, **options))
    return lab


def new_mirror(data: dict) -> None:  # type: ignore[type-arg]
    data["spec"]["engineConfig"]["registries"]["mirrors"]["docker.io"]["endpoint"] = \
        [NEW_MIRROR]


def phase_block(out: str, number: int) -> str:
    """The lines of phase `number` in a text plan, its title line included."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"{number:>2}. "))
    end = next((i for i, ln in enumerate(lines[start + 1:], start + 1)
                if not ln.startswith("      ")), len(lines))
    return "\n".join(lines[start:end])


# 1. Partial reachability is said, never hidden.

def test_unreachable_hosts_are_counted_and_never_read_as_no_changes(lab_factory) -> None:
    lab = k3s_lab(lab_factory)
    gone = [lab.host(name).address for name in ("wrk-2", "wrk-3")]
    for name in ("wrk-2", "wrk-3"):
        lab.exec(name, "iptables -I INPUT -p tcp --dport 22 -j DROP")
    config = lab.dir / "cluster.yaml"
    result = cargoship("plan", "-c", config, "-out", lab.dir / "plan.json")
    out = result.stdout
    assert result.returncode == 1, out
    assert not (lab.dir / "plan.json").exists()
    both = f"{gone[0]}, {gone[1]}"
    connect = phase_block(out, 1)
    assert f"2 host(s) ok, 2 failed ({both})" in connect, connect
    for number in (2, 4, 5, 6):  # the later preflight phases never saw those hosts
        block = phase_block(out, number)
        # "other": phase 6 also has a cluster line (a single controller: not gated on etcd).
        assert re.search(rf"2 (other )?host\(s\) ok, 2 skipped \({re.escape(both)}: failed "
                         r"an earlier phase\)", block), block
    workers = phase_block(out, 8)
    assert "no changes" not in workers, workers
    assert f"not assessed on {both} (unreachable)" in workers, workers
    assert "ctl-1" not in phase_block(out, 7) or "not assessed" not in phase_block(out, 7)
    # Each problem once, wherever it goes.
    everything = result.stdout + result.stderr
    for address in gone:
        assert everything.count(f"cannot connect to {address}:22") == 1, everything

    as_json = cargoship("plan", "-c", config, "--json")
    assert as_json.returncode == 1
    plan = json.loads(as_json.stdout)
    not_read = {(u["phase"], u["host"]["address"]) for u in plan["unassessed"]
                if "unreachable" in u["reason"]}
    assert {("Sync Registry Config Worker", a) for a in gone} <= not_read, plan["unassessed"]
    phase8 = next(p for p in plan["phases"] if p["number"] == 8)
    assert phase8["outcome"] != "no changes", phase8
    assert [p["text"].count("cannot connect") for p in plan["problems"]] == [1, 1]
    assert as_json.stderr.count("cannot connect") == 0, as_json.stderr
    # The counts the text has, for scripts: per phase, in the plan document.
    hosts = {p["number"]: p["hosts"] for p in plan["phases"]}
    assert hosts[1] == {"ok": 2, "failed": 2, "skipped": 0}, plan["phases"]
    for number in (2, 4, 5, 6):
        assert hosts[number] == {"ok": 2, "failed": 0, "skipped": 2}, plan["phases"]
    assert hosts[8] is None, plan["phases"]  # reported: its unassessed items say it

    # And in markdown: the plan document is a plan file (never applyable, with problems),
    # so show renders it for a pull request as it would any plan.
    document = lab.dir / "unreachable.json"
    document.write_text(as_json.stdout)
    markdown = cargoship("show", document, "--markdown")
    assert markdown.returncode == 0, markdown.stderr
    rows = {int(line.split("|")[1]): line for line in markdown.stdout.splitlines()
            if line.startswith("| ") and line.split("|")[1].strip().isdigit()}
    assert f"| ran: 2 host(s) ok, 2 failed ({both}) |" in rows[1], rows[1]
    for number in (2, 4, 5, 6):
        assert re.search(rf": 2 (other )?host\(s\) ok, 2 skipped \({re.escape(both)}: "
                         r"failed an earlier phase\) \|", rows[number]), rows[number]
    assert "no changes" not in rows[8], rows[8]
    assert f"Sync Registry Config Worker: not assessed on {both} (unreachable)" in \
        markdown.stdout, markdown.stdout
    for address in gone:
        assert markdown.stdout.count(f"cannot connect to {address}:22") == 1, markdown.stdout


# 2. Failure reasons a person can read; 4. counts that are true.

def crash_loop(lab_factory, tmp_path: Path,  # type: ignore[no-untyped-def]
               *options: str) -> tuple[Lab, subprocess.CompletedProcess[str], Path]:
    lab = k3s_lab(lab_factory, workers=1)
    refused_audit_policy(lab)
    plan_file = tmp_path / "plan.json"
    assert cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan_file).returncode == 0
    result = cargoship("apply", plan_file, "--confirm", *options, timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    return lab, result, plan_file


def failure_block(out: str) -> list[str]:
    """The host's outcome line and the indented lines under it."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines)
                 if ln.startswith("  ctl-1 (") and "rolled back:" in ln)
    end = next(i for i, ln in enumerate(lines[start + 1:], start + 1)
               if not ln.startswith("      "))
    return lines[start:end]


def test_a_crash_loop_reads_as_a_headline_and_the_log_since_the_restart(
        lab_factory, tmp_path: Path) -> None:
    _, result, plan_file = crash_loop(lab_factory, tmp_path)
    out = result.stdout
    assert " | " not in out, out
    block = failure_block(out)
    headline = block[0]
    assert len(headline) < 240, headline
    assert "k3s is crash-looping" in headline and "previous files restored" in headline
    log = block[1:]
    assert log[0].strip().startswith("engine log since the restart"), block
    assert 1 <= len(log) <= 12 and all(len(line) <= 240 for line in log), block
    assert any("rules[0].nonResourceURLs: Invalid value" in line for line in log), block
    # Only what the restart logged: the engine's lines from before it are left out.
    assert "k3s controller running" not in "\n".join(log), block
    # Printed once: the progress line says what failed, the ending shows the log.
    assert out.count("engine log since the restart") == 1, out
    shown = cargoship("show", plan_file.with_suffix(".applied.json"))
    assert shown.returncode == 0, shown.stderr
    assert " | " not in shown.stdout
    assert shown.stdout.count("engine log since the restart") == 1, shown.stdout
    assert "\n".join(line.strip() for line in log) in "\n".join(
        line.strip() for line in shown.stdout.splitlines()), shown.stdout


def test_a_failed_apply_counts_the_restarts_it_made(lab_factory, tmp_path: Path) -> None:
    _, result, _ = crash_loop(lab_factory, tmp_path)
    summary = next(line for line in result.stdout.splitlines()
                   if line.startswith("Apply FAILED"))
    # ctl-1 restarted twice: with the new files, and back on the old ones.
    assert "0 host(s) changed, 2 engine restart(s), 1 rolled back" in summary, summary


def test_json_and_the_record_count_a_rollbacks_restart(lab_factory, tmp_path: Path) -> None:
    lab, result, plan_file = crash_loop(lab_factory, tmp_path, "--json")
    out = conforms("apply-output.schema.json", result.stdout)
    assert out["outcome"] == "failed", out
    # ctl-1 restarted twice: with the new files, and back on the old ones.
    assert out["restarts"] == 2, out
    hosts = {h["host"]["name"]: h for h in out["hosts"]}
    assert (hosts["ctl-1"]["status"], hosts["ctl-1"]["restarts"]) == ("rolled back", 2), hosts
    assert (hosts["wrk-1"]["status"], hosts["wrk-1"]["restarts"]) == ("unchanged", 0), hosts
    record_file = plan_file.with_suffix(".applied.json")
    record = conforms("apply-record.schema.json", record_file.read_text())
    assert record["restarts"] == 2 and record["hosts"] == out["hosts"], record
    on_host = conforms("apply-record.schema.json", lab.exec(
        "ctl-1", f"cat /var/lib/cargoship/applied/{out['plan_id']}.json").stdout)
    assert on_host["restarts"] == 2, on_host
    shown = cargoship("show", record_file)
    assert shown.returncode == 0, shown.stderr
    assert "  0 host(s) changed, 2 engine restart(s), 1 rolled back, 1 unchanged" in \
        shown.stdout.splitlines(), shown.stdout


# 3. Refusals lead with the deciding reason; none claims a change that did not happen.

def test_a_superseded_plan_is_refused_for_that_first(lab_factory, tmp_path: Path) -> None:
    lab = k3s_lab(lab_factory, workers=2, labelProfiles=True)
    config = lab.dir / "cluster.yaml"

    def edge(data: dict) -> None:  # type: ignore[type-arg]
        data["spec"]["profiles"] = {"edge": {}}
        for host in data["spec"]["hosts"][1:]:
            host["profile"] = "edge"

    edit_config(config, edge)
    labels = tmp_path / "labels.json"
    assert cargoship("plan", "-c", config, "-out", labels).returncode == 0
    assert cargoship("apply", labels, "--confirm", timeout=300).returncode == 0
    edit_config(config, new_mirror)
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    assert cargoship("plan", "-c", config, "-out", first).returncode == 0
    assert cargoship("plan", "-c", config, "-out", second).returncode == 0
    assert cargoship("apply", second, "--confirm", timeout=300).returncode == 0
    second_id = json.loads(second.read_text())["plan_id"]

    refused = cargoship("apply", first, "--confirm", timeout=300)
    assert refused.returncode == 1
    lines = refused.stderr.strip().splitlines()
    assert lines[0].startswith("error: "), refused.stderr
    assert f"superseded by plan {second_id}" in lines[0], refused.stderr
    assert len(lines[0]) < 300, lines[0]
    assert "nothing was changed" in refused.stderr
    # The rest: a short list, one line per reason, hosts grouped.
    rest = lines[1:]
    assert rest and all(line.startswith("  - ") for line in rest), refused.stderr
    assert len(rest) <= 4, refused.stderr
    # The edge label was set before either plan and never changed since.
    assert "label:" not in refused.stderr, refused.stderr
    assert "node-role.kubernetes.io/edge" not in refused.stderr, refused.stderr


# 5. The small things.

def test_an_empty_plan_applies_as_nothing_to_apply(lab_factory, tmp_path: Path) -> None:
    lab = k3s_lab(lab_factory, workers=1)
    plan_file = tmp_path / "plan.json"
    assert cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan_file).returncode == 0
    # No --confirm and no terminal: there is nothing to ask about.
    result = cargoship("apply", plan_file)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().splitlines()[0] == "No changes. Nothing to apply.", \
        result.stdout
    assert "Apply plan" not in result.stdout


def test_an_apply_record_given_to_apply_says_what_it_is(lab_factory, tmp_path: Path) -> None:
    lab = k3s_lab(lab_factory, workers=1)
    lab.exec("wrk-1", f"printf 'mirrors: {{}}\\n' > {K3S_REGISTRIES}")
    plan_file = tmp_path / "plan.json"
    assert cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan_file).returncode == 0
    assert cargoship("apply", plan_file, "--confirm", timeout=300).returncode == 0
    record = plan_file.with_suffix(".applied.json")
    result = cargoship("apply", record, "--confirm")
    assert result.returncode == 1
    assert "no format_version" not in result.stderr, result.stderr
    assert f"{record} is the apply record of plan " in result.stderr, result.stderr
    assert f"cargoship show {record}" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_detached_signatures_are_verified_where_they_live(lab_factory, tmp_path: Path) -> None:
    lab = k3s_lab(lab_factory, workers=1)
    lab.exec("wrk-1", f"printf 'mirrors: {{}}\\n' > {K3S_REGISTRIES}")
    plan_file = tmp_path / "plan.json"
    made = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan_file)
    assert made.returncode == 0, made.stdout + made.stderr
    alice = key(tmp_path, "alice")
    signers = allowed(tmp_path, alice)
    sigs = tmp_path / "sigs"
    assert cargoship("sign", plan_file, "--key", alice, "--detached", "--sig-dir",
                     sigs).returncode == 0
    shown = cargoship("show", plan_file, "--signatures", sigs, "--allowed-signers", signers)
    assert shown.returncode == 0, shown.stderr
    assert "Signatures (1):" in shown.stdout and "valid and trusted: alice@example.com" in \
        shown.stdout, shown.stdout
    # Apply says where it looked when it found too few.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    refused = cargoship("apply", plan_file, "--confirm", "--require-signed-by", signers,
                        "--signatures", elsewhere)
    assert refused.returncode == 1
    assert "0 valid signature(s)" in refused.stderr
    assert f"looked in the plan and in {elsewhere}" in refused.stderr, refused.stderr


def test_validate_reports_every_error_in_one_run(lab_factory) -> None:
    lab = k3s_lab(lab_factory, workers=1)
    config = lab.dir / "cluster.yaml"

    def broken(data: dict) -> None:  # type: ignore[type-arg]
        data["spec"]["profiles"] = {"edge": {}}
        data["spec"]["hosts"][1]["profile"] = "egde"  # misspelled
        data["spec"]["hosts"][0]["ssh"]["port"] = "22"  # a schema error

    edit_config(config, broken)
    result = cargoship("validate", "-c", config)
    assert result.returncode == 1
    assert "spec.hosts[0].ssh.port" in result.stderr, result.stderr
    assert "egde" in result.stderr, result.stderr


def test_one_shot_plans_are_kept_apart_from_the_config(lab_factory, tmp_path: Path) -> None:
    lab = k3s_lab(lab_factory, workers=1)
    lab.exec("wrk-1", f"printf 'mirrors: {{}}\\n' > {K3S_REGISTRIES}")
    work = tmp_path / "repo"
    (work / ".cargoship").mkdir(parents=True)
    (work / ".cargoship" / "allowed_signers").write_text("")
    state = tmp_path / "state"
    result = subprocess.run(
        [*cargoship_argv(), "engine-config-sync",
         "-c", str(lab.dir / "cluster.yaml"), "--confirm"], cwd=work, capture_output=True,
        text=True, timeout=300, env={**os.environ, "XDG_STATE_HOME": str(state)},
        stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(p.name for p in (work / ".cargoship").iterdir()) == ["allowed_signers"]
    kept = list((state / "cargoship" / "plans").glob("*.plan.json"))
    assert len(kept) == 1, list(state.rglob("*"))
    assert str(kept[0]) in result.stdout


def test_completion_completes_shells(tmp_path: Path) -> None:
    path = script("bash", tmp_path)
    assert bash_complete(path, "cargoship completion ") == {"bash", "zsh", "fish"}
    assert bash_complete(path, "cargoship completion z") == {"zsh"}


def test_readme_reference_is_complete() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    reference = readme.split("## CLI reference", 1)[1].split("\n## ", 1)[0]
    for line in reference.splitlines():
        if line.lstrip().startswith("- `"):
            text = line.split(":", 1)[1].strip() if "`:" in line else line
            assert text and not text.endswith(("one of", "one of ")), line
    help_text = cargoship("sign", "--help").stdout
    assert "a plan file from plan -out" in " ".join(help_text.split()), help_text
