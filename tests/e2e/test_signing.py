"""Signed plans with real SSH keys: sign, show, and apply --require-signed-by."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from planner.plan.codec import digest_of
from tests.e2e.cli import cargoship
from tests.e2e.test_apply import REGISTRIES, cluster, plan


def key(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{name}@example.com",
                    "-f", str(path)], check=True)
    return path


def allowed(tmp_path: Path, *keys: Path) -> Path:
    path = tmp_path / "allowed_signers"
    path.write_text("".join(f"{k.name}@example.com "
                            f"{' '.join(k.with_suffix('.pub').read_text().split()[:2])}\n"
                            for k in keys))
    return path


def test_signatures_gate_apply(lab_factory, tmp_path: Path) -> None:
    lab = cluster(lab_factory, workers=1)
    lab.exec("wrk-1", f"printf 'mirrors: {{}}\\n' > {REGISTRIES}")
    plan_file = tmp_path / "plan.json"
    plan(lab, plan_file)
    alice, bob, mallory = key(tmp_path, "alice"), key(tmp_path, "bob"), key(tmp_path, "mallory")
    signers = allowed(tmp_path, alice, bob)

    def apply(*extra: str):  # type: ignore[no-untyped-def]
        return cargoship("apply", plan_file, "--confirm", "--require-signed-by", signers,
                         *extra, timeout=300)

    missing = apply()
    assert missing.returncode == 1 and "has 0 valid signature(s)" in missing.stderr
    shown = cargoship("show", plan_file)
    assert "Signatures: none" in shown.stdout

    assert cargoship("sign", plan_file, "--key", mallory).returncode == 0
    wrong = apply()
    assert wrong.returncode == 1 and "is not in" in wrong.stderr

    before = json.loads(plan_file.read_text())["digest"]
    assert cargoship("sign", plan_file, "--key", alice).returncode == 0
    assert cargoship("sign", plan_file, "--key", bob).returncode == 0
    assert json.loads(plan_file.read_text())["digest"] == before  # signing changes nothing
    shown = cargoship("show", plan_file)
    # Whose key it is, only an allowed-signers file says; the key's comment says nothing.
    assert shown.stdout.count("well formed, by an unverified key") == 3, shown.stdout
    assert "alice@example.com" not in shown.stdout

    revoked = tmp_path / "revoked"
    revoked.write_text(bob.with_suffix(".pub").read_text())
    not_enough = apply("--min-signatures", "2", "--revoked-keys", str(revoked))
    assert not_enough.returncode == 1 and "is revoked" in not_enough.stderr
    assert "has 1 valid signature(s)" in not_enough.stderr

    edited = tmp_path / "edited.json"
    data = json.loads(plan_file.read_text())
    data["created_by"] = "alice@laptop"  # text the plan's own checks can't hold it to
    data["digest"] = digest_of(data)  # a careful forger keeps the digest consistent
    edited.write_text(json.dumps(data))
    forged = cargoship("apply", edited, "--confirm", "--require-signed-by", signers)
    assert forged.returncode == 1
    assert "does not verify against this plan's digest" in forged.stderr
    assert "INVALID" in cargoship("show", edited).stdout
    assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == "mirrors: {}\n"

    accepted = apply("--min-signatures", "2")
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert "Signed by alice@example.com, bob@example.com: accepted" in accepted.stdout
    assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout != "mirrors: {}\n"

