"""Approval that does not depend on who runs apply (issue 25, point 7).

Signatures were enforced only when the person running apply passed --require-signed-by;
`engine-config-sync --confirm` planned and applied with no review at all. Once the
cluster's controllers hold a signature policy, every apply enforces it, flags or not, and
replacing it takes the approval of the signers it names.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.e2e.cli import cargoship, cargoship_argv
from tests.e2e.test_apply import REGISTRIES, cluster, plan
from tests.e2e.test_signing import allowed, key

POLICY = "/etc/cargoship/signature-policy.json"


@pytest.mark.reliability("trust: approval does not depend on who runs apply")
def test_a_policy_on_the_controllers_is_enforced_whatever_the_flags(lab_factory,
                                                                    tmp_path: Path,
                                                                    tally) -> None:
    tally.case()
    lab = cluster(lab_factory, workers=1)
    config = lab.dir / "cluster.yaml"
    alice, bob, mallory = key(tmp_path, "alice"), key(tmp_path, "bob"), key(tmp_path, "mallory")
    signers = allowed(tmp_path, alice, bob)
    dry = cargoship("signature-policy", "-c", config, "--allowed-signers", signers,
                    "--min-signatures", "2")
    assert dry.returncode == 1 and "Nothing was changed: add --confirm" in dry.stdout, dry.stdout
    made = cargoship("signature-policy", "-c", config, "--allowed-signers", signers,
                     "--min-signatures", "2", "--confirm")
    assert made.returncode == 0, made.stdout + made.stderr
    mode = lab.exec("ctl-1", f"stat -c '%u %a' {POLICY} /etc/cargoship").stdout.split()
    assert mode == ["0", "600", "0", "700"], mode
    shown = cargoship("signature-policy", "-c", config)
    assert "2 signature(s) from alice@example.com, bob@example.com" in shown.stdout

    lab.exec("wrk-1", f"printf 'mirrors: {{}}\\n' > {REGISTRIES}")
    plan_file = tmp_path / "plan.json"
    plan(lab, plan_file)
    # No flag, one signature of the policy's and one of a stranger's: refused.
    assert cargoship("sign", plan_file, "--key", alice).returncode == 0
    assert cargoship("sign", plan_file, "--key", mallory, "--detached").returncode == 0
    refused = cargoship("apply", plan_file, "--confirm")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "the cluster's signature policy (on its controllers) needs 2 signature(s) from " \
           "alice@example.com, bob@example.com; this plan has 1 (alice@example.com)" \
        in refused.stderr, refused.stderr
    assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == "mirrors: {}\n"
    # engine-config-sync --confirm has no review at all: refused too.
    # (Run where it may keep its plan: .cargoship/ under the working directory.)
    one_shot = subprocess.run([*cargoship_argv(), "engine-config-sync", "-c", str(config),
                               "--confirm"], capture_output=True, text=True, cwd=tmp_path,
                              stdin=subprocess.DEVNULL, timeout=180)
    assert one_shot.returncode == 1 and "this plan has 0" in one_shot.stderr, one_shot.stderr
    assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == "mirrors: {}\n"
    # Bob signs (detached, as a reviewer in a pull request would): applied, no flag needed.
    assert cargoship("sign", plan_file, "--key", bob, "--detached").returncode == 0
    applied = cargoship("apply", plan_file, "--confirm", timeout=300)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "signature policy is met: signed by alice@example.com, bob@example.com" \
        in applied.stdout

    # Replacing the policy (mallory alone, one signature) needs alice's and bob's approval.
    weak = allowed(tmp_path, mallory)
    grab = cargoship("signature-policy", "-c", config, "--allowed-signers", weak,
                     "--min-signatures", "1", "--confirm")
    assert grab.returncode == 1 and "replacing the signature policy needs 2 approval(s)" \
        in grab.stderr, grab.stdout + grab.stderr
    digest = grab.stderr.split(" over ")[1].split()[0]
    approvals = tmp_path / "approvals"
    approvals.mkdir()
    for who in (alice, bob):
        signed = subprocess.run(["ssh-keygen", "-Y", "sign", "-n", "cargoship-policy", "-f",
                                 str(who)], input=digest.encode(), capture_output=True,
                                check=True)
        (approvals / f"{who.name}.sig").write_bytes(signed.stdout)
    replaced = cargoship("signature-policy", "-c", config, "--allowed-signers", weak,
                         "--min-signatures", "1", "--approvals", approvals, "--confirm")
    assert replaced.returncode == 0, replaced.stdout + replaced.stderr
    assert "approved by alice@example.com, bob@example.com" in replaced.stdout


@pytest.mark.reliability("trust: approval does not depend on who runs apply")
def test_a_policy_file_anyone_but_root_could_write_is_not_believed(lab_factory,
                                                                   tmp_path: Path,
                                                                   tally) -> None:
    tally.case()
    lab = cluster(lab_factory, workers=1)
    alice = key(tmp_path, "alice")
    made = cargoship("signature-policy", "-c", lab.dir / "cluster.yaml", "--allowed-signers",
                     allowed(tmp_path, alice), "--min-signatures", "1", "--confirm")
    assert made.returncode == 0, made.stdout + made.stderr
    lab.exec("ctl-1", f"chmod 0666 {POLICY}")
    lab.exec("wrk-1", f"printf 'mirrors: {{}}\\n' > {REGISTRIES}")
    plan_file = tmp_path / "plan.json"
    plan(lab, plan_file)
    assert cargoship("sign", plan_file, "--key", alice).returncode == 0
    refused = cargoship("apply", plan_file, "--confirm")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert f"{POLICY} is not root's alone (0 666 regular file)" in refused.stderr
