"""History believes a record only with what the plan that made it says (issue 25, point 2).

Records live on hosts, and root on one host writes what it likes there: an invented plan
"applied (current) by ..., signed by alice, bob", or the real plan's record with its changes
dropped. A plan is shown as verified only when its records agree across its hosts; signers
only as an allowed-signers file verifies the signatures over the plan's digest.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from tests.e2e.cli import cargoship
from tests.e2e.test_apply import REGISTRIES, cluster, plan
from tests.e2e.test_signing import allowed, key

RECORDS = "/var/lib/cargoship/applied"


@pytest.mark.reliability("trust: history believes no single host")
def test_records_forged_on_one_host_are_shown_unverified(lab_factory, tmp_path: Path,
                                                          tally) -> None:
    tally.case()
    lab = cluster(lab_factory, workers=2)
    lab.exec("wrk-1", f"printf 'mirrors: {{}}\\n' > {REGISTRIES}")
    plan_file = tmp_path / "plan.json"
    plan(lab, plan_file)
    alice, bob = key(tmp_path, "alice"), key(tmp_path, "bob")
    signers = allowed(tmp_path, alice, bob)
    for who in (alice, bob):
        assert cargoship("sign", plan_file, "--key", who).returncode == 0
    applied = cargoship("apply", plan_file, "--confirm", "--require-signed-by", signers,
                        "--min-signatures", "2", timeout=300)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    real = json.loads(plan_file.read_text())["plan_id"]
    record = json.loads(lab.exec("wrk-2", f"cat {RECORDS}/{real}.json").stdout)

    # Root on wrk-2: an invented plan, newer, "signed by alice, bob", with the real
    # plan's digest and signatures copied in, its changes naming hosts by ports that are no
    # ports and its lists holding what no host is (history lists every host's records: one
    # host's must not end the listing); and the real plan's record, its changes gone.
    invented = secrets.token_hex(16)
    odd = [{"host": {"name": "ctl-1", "address": "10.9.9.9", "port": port},
            "action": "write-file", "target": "/etc/passwd", "status": "done"}
           for port in ("22x", None, 2 ** 70)]
    fake = {**record, "plan_id": invented, "applied_at": "2099-01-01T00:00:00+00:00",
            "applied_by": "mallory", "changes": odd, "signers": ["alice", "bob"],
            "plan_hosts": [*record["plan_hosts"], {"a": 1}, ["b"]], "records_missing_on": 5}
    lab.exec("wrk-2", f"cat > {RECORDS}/{invented}.json", input=json.dumps(fake))
    edited = {**record, "changes": [], "applied_by": "mallory"}
    lab.exec("wrk-2", f"cat > {RECORDS}/{real}.json", input=json.dumps(edited))

    result = cargoship("history", "-c", lab.dir / "cluster.yaml", "--allowed-signers", signers)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    heads = {line.split()[1]: line for line in out.splitlines() if line.startswith("plan ")}
    assert heads[invented].startswith(f"plan {invented}  unverified"), out
    assert "unverified: no record of it on" in out, out
    assert "    ctl-1 (10.9.9.9, port '22x': not a port): write-file /etc/passwd: done" \
        in out.splitlines(), out
    assert "    ctl-1 (10.9.9.9, port 'None': not a port): write-file /etc/passwd: done" \
        in out.splitlines(), out
    assert f"unverified: its digest is also claimed by plan(s) {real}" in out, out
    # The real plan stays current, applied by whoever really applied it, its changes kept,
    # signed by alice and bob as their signatures (not the record) say.
    assert heads[real].startswith(f"plan {real}  applied (current)"), out
    assert "mallory" not in heads[real] and "signed by alice@example.com, bob@example.com " \
        "(verified)" in heads[real], out
    assert "this host's record disagrees with the others: unverified" in out, out
    assert f"{REGISTRIES}: done" in out, out

    as_json = json.loads(cargoship("history", "-c", lab.dir / "cluster.yaml", "--json").stdout)
    by_id = {p["plan_id"]: p for p in as_json["plans"]}
    assert by_id[invented]["verified"] is False and by_id[invented]["signers"] == []
    assert by_id[real]["verified"] is True and by_id[real]["signers"] == []  # not checked
