"""More of `cargoship apply` on lab hosts: host keys, racing applies, PDBs, Ctrl-C, locks,
kubeconfig and labels, force-unlock, and the one-shot engine-config-sync --confirm."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import yaml

from tests.e2e.cli import cargoship, cargoship_argv, edit_config
from tests.e2e.test_apply import REGISTRIES, cluster, plan
from tests.lab import Lab


def drift(lab: Lab, *hosts: str) -> None:
    for host in hosts:
        lab.exec(host, f"printf 'mirrors: {{}}\\n' > {REGISTRIES}")


def test_changed_host_key_is_refused(lab_factory, tmp_path: Path) -> None:
    lab = cluster(lab_factory, workers=1)
    drift(lab, "wrk-1")
    plan_file = tmp_path / "plan.json"
    plan(lab, plan_file)
    # The host is rebuilt with a new key, and someone accepted it into known_hosts.
    lab.exec("wrk-1", "rm -f /etc/ssh/lab_host_ed25519_key* && ssh-keygen -q -t ed25519 -N '' "
                      "-f /etc/ssh/lab_host_ed25519_key")
    lab.restart_sshd("wrk-1")
    new_key = lab.exec("wrk-1", "cut -d' ' -f1,2 /etc/ssh/lab_host_ed25519_key.pub").stdout
    known = lab.dir / "known_hosts"
    address = lab.host("wrk-1").address
    known.write_text("".join(line for line in known.read_text().splitlines(keepends=True)
                             if not line.startswith(address + " ")) + f"{address} {new_key}")
    refused = cargoship("apply", plan_file, "--confirm")
    assert refused.returncode == 1
    assert "the plan was made against SHA256:" in refused.stderr
    assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == "mirrors: {}\n"


def test_two_applies_at_once_exactly_one_proceeds(lab_factory, tmp_path: Path) -> None:
    lab = cluster(lab_factory, workers=2)
    drift(lab, "wrk-1", "wrk-2")
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    plan(lab, first)
    plan(lab, second)
    runs = [subprocess.Popen([*cargoship_argv(), "apply", str(p), "--confirm"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for p in (first, second)]
    results = [(r.wait(timeout=300), *r.communicate()) for r in runs]
    assert sorted(code for code, _, _ in results) == [0, 1]
    loser = next(err for code, _, err in results if code == 1)
    # Either it met the lock (naming the holder) or came after, when the hosts had changed.
    assert "locked by" in loser or "changed since the plan was made" in loser


def test_lock_timeout_waits_for_a_lock_to_go_stale(lab_factory, tmp_path: Path) -> None:
    lab = cluster(lab_factory, workers=1)
    drift(lab, "wrk-1")
    plan_file = tmp_path / "plan.json"
    plan(lab, plan_file)
    holder = {"id": "5ca1ab1e", "holder": "bob@ci", "pid": 7, "plan_id": None,
              "since": "2026-12-01T00:00:00Z"}
    # Touched just now: live for a minute, however slow the machine is.
    lab.exec("wrk-1", f"mkdir -p /run/cargoship && echo '{json.dumps(holder)}' > "
                      "/run/cargoship/lock")
    refused = cargoship("apply", plan_file, "--confirm")
    assert refused.returncode == 1 and "bob@ci" in refused.stderr
    # Touched 55 s ago: live for about 5 s more, then stale; the wait must outlast that.
    lab.exec("wrk-1", "touch -d '-55 sec' /run/cargoship/lock")
    waited = cargoship("apply", plan_file, "--confirm", "--lock-timeout", "30", timeout=300)
    assert waited.returncode == 0, waited.stdout + waited.stderr
    assert "took over stale lock 5ca1ab1e" in waited.stdout


def test_kubeconfig_and_labels_are_applied(lab_factory, tmp_path: Path) -> None:
    lab = cluster(lab_factory, workers=2)
    local = tmp_path / "kubeconfig"
    local.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "other",
        "clusters": [{"name": "other", "cluster": {"server": "https://other:6443"}}],
        "users": [{"name": "other", "user": {"token": "t"}}],
        "contexts": [{"name": "other", "context": {"cluster": "other", "user": "other"}}]}))

    def edit(data: dict) -> None:  # type: ignore[type-arg]
        data["spec"]["profiles"] = {"edge": {}}
        data["spec"]["hosts"][3]["profile"] = "edge"
        data["spec"]["hosts"][4]["profile"] = "edge"
        data["spec"]["options"].update(labelProfiles=True, kubeconfig={
            "enabled": True, "path": str(local), "context": "lab"})

    edit_config(lab.dir / "cluster.yaml", edit)
    drift(lab, "wrk-2")  # wrk-2's label is unassessed: assessed when its turn comes
    plan_file = tmp_path / "plan.json"
    plan(lab, plan_file)
    result = cargoship("apply", plan_file, "--confirm", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    for node in ("wrk-1", "wrk-2"):
        labels = lab.api("GET", f"/api/v1/nodes/{node}")["metadata"]["labels"]
        assert labels["node-role.kubernetes.io/edge"] == "true"
    merged = yaml.safe_load(local.read_text())
    assert {c["name"] for c in merged["contexts"]} == {"other", "lab"}
    assert local.stat().st_mode & 0o777 == 0o600
    again = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--detailed-exitcode")
    assert again.returncode == 0, again.stdout


def test_force_unlock_removes_only_the_named_lock(lab_factory) -> None:
    lab = cluster(lab_factory, workers=1)
    holder = {"id": "dead0001", "holder": "crashed@ci", "pid": 7, "plan_id": None,
              "since": "2026-12-01T00:00:00Z"}
    for host in ("ctl-1", "wrk-1"):
        lab.exec(host, f"mkdir -p /run/cargoship && echo '{json.dumps(holder)}' > "
                       "/run/cargoship/lock")
    wrong = cargoship("force-unlock", "-c", lab.dir / "cluster.yaml", "beef0002")
    assert wrong.returncode == 1 and "no host holds lock beef0002" in wrong.stderr
    bad = cargoship("force-unlock", "-c", lab.dir / "cluster.yaml", "x; rm -rf /")
    assert bad.returncode == 1 and "is not a lock id" in bad.stderr
    unasked = cargoship("force-unlock", "-c", lab.dir / "cluster.yaml", "dead0001")
    assert unasked.returncode == 1 and "without --confirm" in unasked.stderr
    assert lab.exec("wrk-1", "test -e /run/cargoship/lock", check=False).returncode == 0
    done = cargoship("force-unlock", "-c", lab.dir / "cluster.yaml", "dead0001", "--confirm")
    assert done.returncode == 0 and "from 2 host(s)" in done.stdout
    for host in ("ctl-1", "wrk-1"):
        assert lab.exec(host, "test -e /run/cargoship/lock", check=False).returncode == 1


def test_engine_config_sync_confirm_plans_and_applies(lab_factory, tmp_path: Path) -> None:
    lab = cluster(lab_factory, workers=1)
    drift(lab, "wrk-1")
    refused = cargoship("engine-config-sync", "-c", lab.dir / "cluster.yaml")
    assert refused.returncode == 1
    state = tmp_path / "state"
    result = subprocess.run([*cargoship_argv(), "engine-config-sync", "-c",
                             str(lab.dir / "cluster.yaml"), "--confirm"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "XDG_STATE_HOME": str(state)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout != "mirrors: {}\n"
    # Kept for audit in the user's state directory, never the working directory.
    assert not (tmp_path / ".cargoship").exists()
    kept = list((state / "cargoship" / "plans").glob("*.plan.json"))
    assert len(kept) == 1 and kept[0].with_name(
        kept[0].name.replace(".plan.json", ".plan.applied.json")).exists()


def test_without_confirm_a_terminal_must_type_yes(lab_factory, tmp_path: Path) -> None:
    lab = cluster(lab_factory, workers=1)
    drift(lab, "wrk-1")
    plan_file = tmp_path / "plan.json"
    plan(lab, plan_file)
    command = " ".join(shlex.quote(a) for a in [*cargoship_argv(), "apply", str(plan_file)])

    def on_a_terminal(answer: str) -> subprocess.CompletedProcess[str]:
        # `script` gives the command a pseudo-terminal and types our answer into it.
        return subprocess.run(["script", "-qec", command, "/dev/null"], input=answer,
                              capture_output=True, text=True, timeout=300)

    no = on_a_terminal("y\n")
    assert no.returncode == 1 and "Only 'yes' is accepted" in no.stdout
    assert "Apply cancelled; nothing was changed." in no.stdout
    assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == "mirrors: {}\n"
    yes = on_a_terminal("yes\n")
    assert yes.returncode == 0, yes.stdout
    assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout != "mirrors: {}\n"


LEFTOVERS = ("/etc/rancher/rke2/.cargoship.Ab12Cd", "/etc/rancher/rke2/config.yaml.d/"
             ".cargoship.Qq00Zz", "/var/lib/rancher/rke2/server/manifests/.cargoship.Zz99Yy",
             "/var/lib/cargoship/applied/.cargoship.x1Y2z3", "/run/cargoship/lock.Qw12Er",
             "/var/lib/cargoship/in-progress.json.tmp",
             "/var/lib/cargoship/backups/0123456789abcdef0123456789abcdef/etc/rancher/rke2/"
             "registries.yaml.tmp")
NOT_OURS = ("/etc/rancher/rke2/.cargoship.user-notes", "/etc/rancher/rke2/notes.tmp",
            "/run/cargoship/lock.mutex")


def test_temp_files_of_a_killed_run_are_removed_by_the_next_apply(
        lab_factory, tmp_path: Path) -> None:
    lab = cluster(lab_factory, workers=1)
    paths = " ".join(map(shlex.quote, LEFTOVERS + NOT_OURS))
    # What a run killed between writing a temp and renaming it leaves (names as our writers
    # make them), beside files that only look alike.
    lab.exec("wrk-1", f"for f in {paths}; do mkdir -p \"$(dirname \"$f\")\"; "
                      "echo 'password: leftover' > \"$f\"; done")

    def present() -> set[str]:
        out = lab.exec("wrk-1", f"for f in {paths}; do [ -e \"$f\" ] && echo \"$f\"; done; true")
        return set(out.stdout.split())

    drift(lab, "wrk-1")
    plan_file = tmp_path / "plan.json"
    plan(lab, plan_file)
    assert present() == set(LEFTOVERS + NOT_OURS)  # a plan removes nothing
    applied = cargoship("apply", plan_file, "--confirm", timeout=300)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    # (The in-progress marker's temp may have been reused by this run's own marker.)
    assert "] removed " in applied.stdout and " temp file(s) a killed run left" in \
        applied.stdout, applied.stdout
    assert present() == set(NOT_OURS)
