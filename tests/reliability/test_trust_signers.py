"""Trust chain: a signer is a principal an allowed-signers file names, never what a key's
comment says. End to end through `cargoship sign`, `show`, `apply` and `history`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.e2e.cli import cargoship
from tests.e2e.test_apply import REGISTRIES, cluster, plan
from tests.e2e.test_signing import key


@pytest.mark.reliability("trust: signers are identities")
def test_signers_are_principals_of_the_allowed_signers_file_never_key_comments(  # type: ignore[no-untyped-def]
        lab_factory, tmp_path: Path, tally) -> None:
    tally.case(3)
    lab = cluster(lab_factory, workers=1)
    lab.exec("wrk-1", f"printf 'mirrors: {{}}\\n' > {REGISTRIES}")
    plan_file = tmp_path / "plan.json"
    plan(lab, plan_file)
    alice = key(tmp_path, "alice")
    # Mallory's key says it is Alice's: a comment is whatever its maker typed.
    mallory = tmp_path / "mallory"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice@example.com",
                    "-f", str(mallory)], check=True)
    trusted = tmp_path / "allowed_signers"
    trusted.write_text(f"alice.ops {' '.join(alice.with_suffix('.pub').read_text().split()[:2])}"
                       "\n")
    for signer in (mallory, alice):
        assert cargoship("sign", plan_file, "--key", signer).returncode == 0

    shown = cargoship("show", plan_file)
    assert "alice@example.com" not in shown.stdout and "alice.ops" not in shown.stdout
    assert shown.stdout.count("well formed, by an unverified key") == 2, shown.stdout
    checked = cargoship("show", plan_file, "--allowed-signers", trusted)
    assert checked.stdout.count("valid and trusted: alice.ops") == 1, checked.stdout
    assert checked.stdout.count("NOT TRUSTED") == 1 and "alice@example.com" not in checked.stdout
    markdown = cargoship("show", plan_file, "--markdown", "--allowed-signers", trusted)
    assert "valid and trusted: alice.ops" in markdown.stdout

    applied = cargoship("apply", plan_file, "--confirm", "--require-signed-by", trusted,
                        timeout=300)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    record = json.loads(plan_file.with_name("plan.applied.json").read_text())
    assert record["signers"] == ["alice.ops"]  # Mallory's valid-but-untrusted one is not
    # History shows signers only as it verifies them itself (the record is a host's word).
    history = cargoship("history", "-c", lab.dir / "cluster.yaml", "--json",
                        "--allowed-signers", trusted)
    [entry] = [p for p in json.loads(history.stdout)["plans"]
               if p["plan_id"] == record["plan_id"]]
    assert entry["signers"] == ["alice.ops"]

    # Applied without checking signatures: whoever signed, nobody is recorded as a signer.
    lab.exec("wrk-1", f"printf 'mirrors: {{}}\\n' > {REGISTRIES}")
    unchecked = tmp_path / "unchecked.json"
    plan(lab, unchecked)
    assert cargoship("sign", unchecked, "--key", alice).returncode == 0
    assert cargoship("apply", unchecked, "--confirm", timeout=300).returncode == 0
    assert json.loads(unchecked.with_name("unchecked.applied.json").read_text())[
        "signers"] == []
