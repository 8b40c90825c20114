"""Apply history from the hosts' records, and a record rendered by show."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.e2e.cli import cargoship, edit_config
from tests.e2e.test_apply import REGISTRIES, cluster, plan


def test_history_lists_plans_current_and_superseded(lab_factory, tmp_path: Path) -> None:
    lab = cluster(lab_factory, workers=1)
    key = tmp_path / "alice"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice@example.com",
                    "-f", str(key)], check=True)
    lab.exec("wrk-1", f"printf 'mirrors: {{}}\\n' > {REGISTRIES}")
    first = tmp_path / "first.json"
    plan(lab, first)
    assert cargoship("sign", first, "--key", key).returncode == 0
    # A signer is the principal the allowed-signers file names (not the key's comment).
    allowed = tmp_path / "allowed_signers"
    allowed.write_text("alice.ops " + " ".join(
        key.with_suffix(".pub").read_text().split()[:2]) + "\n")
    assert cargoship("apply", first, "--confirm", "--require-signed-by", allowed,
                     timeout=300).returncode == 0
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["engineConfig"].update(
        charts={"rke2-ingress-nginx": {"values": {"controller": {"replicaCount": 2}}}}))
    second = tmp_path / "second.json"
    plan(lab, second)
    assert cargoship("apply", second, "--confirm", timeout=300).returncode == 0

    result = cargoship("history", "-c", lab.dir / "cluster.yaml", "--allowed-signers", allowed)
    assert result.returncode == 0, result.stdout + result.stderr
    first_id = first.read_text().split('"plan_id": "')[1][:32]
    second_id = second.read_text().split('"plan_id": "')[1][:32]
    lines = result.stdout.splitlines()
    head = [line for line in lines if line.startswith("plan ")]
    assert head[0].startswith(f"plan {second_id}  applied (current)")
    assert head[1].startswith(f"plan {first_id}  superseded")
    assert "signed by alice.ops (verified)" in head[1]
    # Without an allowed-signers file, no signer is shown: a record is a host's word.
    unchecked = cargoship("history", "-c", lab.dir / "cluster.yaml")
    assert "1 signature(s) not verified (history --allowed-signers FILE)" in unchecked.stdout
    assert "alice.ops" not in unchecked.stdout
    assert any(line.strip().startswith("wrk-1 (") and line.endswith(": applied")
               for line in lines)
    assert "The hosts match the desired config now." in result.stdout

    lab.exec("wrk-1", f"printf 'mirrors: {{}}\\n' > {REGISTRIES}")
    drifted = cargoship("history", "-c", lab.dir / "cluster.yaml")
    assert "differ from the desired config (1 change(s) pending)" in drifted.stdout

    # A host that cannot be read now keeps its line, with what the others' records say.
    address = lab.host("wrk-1").address
    lab.exec("wrk-1", "iptables -I INPUT -p tcp --dport 22 -j REJECT --reject-with tcp-reset")
    try:
        unread = cargoship("history", "-c", lab.dir / "cluster.yaml")
    finally:
        lab.exec("wrk-1", "iptables -D INPUT -p tcp --dport 22 -j REJECT --reject-with "
                          "tcp-reset")
    assert "(some hosts could not be read)" in unread.stdout, unread.stdout
    assert f"    wrk-1 ({address}): applied (as the other hosts' records say; not read now)" \
        in unread.stdout.splitlines(), unread.stdout

    shown = cargoship("show", tmp_path / "first.applied.json")
    assert shown.returncode == 0
    assert shown.stdout.startswith(f"apply record of plan {first_id}")
    assert "signed by alice.ops" in shown.stdout
