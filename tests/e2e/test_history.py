"""Apply history from the hosts' records, and a record rendered by show."""

from __future__ import annotations

import json
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


def test_an_edited_record_is_shown_as_it_stands_never_an_internal_error(tmp_path: Path
                                                                        ) -> None:
    # A record is a file anyone may have edited: a port that is no port, a list that is a
    # number. `show` lists what is there, each odd value as it is.
    odd_host = {"name": "wrk-1", "address": "10.0.0.2", "port": "22; rm -rf /"}
    record = {"plan_id": "0" * 32, "applied_at": "2026-12-06T00:00:00Z", "ok": True,
              "hosts": [{"host": odd_host, "status": "applied"},
                        {"host": {"name": "wrk-2", "address": "10.0.0.3"}, "status": "applied"},
                        {"host": {"name": "wrk-3", "address": "10.0.0.4", "port": 2 ** 70},
                         "status": "applied"}],
              "changes": [{"host": odd_host, "action": "write-file", "target": "/etc/x",
                           "status": "done"}],
              "signers": 5, "notes": 7}
    path = tmp_path / "edited.applied.json"
    path.write_text(json.dumps(record))
    shown = cargoship("show", path)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    lines = shown.stdout.splitlines()
    assert "  wrk-1 (10.0.0.2, port '22; rm -rf /': not a port): applied" in lines, shown.stdout
    assert "  wrk-2 (10.0.0.3, port 'None': not a port): applied" in lines, shown.stdout
    assert f"  wrk-3 (10.0.0.4, port '{str(2 ** 70)[:20]}': not a port): applied" in lines
    assert "  wrk-1 (10.0.0.2, port '22; rm -rf /': not a port): write-file /etc/x: done" \
        in lines, shown.stdout
    assert "signed by" not in shown.stdout and "note:" not in shown.stdout
