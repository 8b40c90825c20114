"""Counting signers (planner/plan/signers.py) for both gates: `apply --require-signed-by`
(cargoship/apply_command.py) and the controllers' signature policy (executor/policy.py). The
decision is tested on its own, without ssh-keygen; each gate is tested for using it and
for its message, with verify() stubbed; one test signs for real."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pytest

from cargoship import apply_command
from executor import policy
from planner.errors import CargoshipError
from planner.plan import signing
from planner.plan.model import Signature
from planner.plan.signers import Count, count_signers
from planner.plan.signing import Check
from tests.unit.test_plan_codec import sample_plan


def sig(key: str) -> Signature:
    return Signature("SHA256:" + key, "", "2026-12-01T03:00:00+00:00", "armored " + key)


def good(key: str, principal: str) -> Check:
    return Check(sig(key), True, principal)


def revoked(key: str, principal: str) -> Check:
    # What verify() says of a revoked key: the allowed-signers file names it, yet invalid.
    return Check(sig(key), False, principal, f"key SHA256:{key} is revoked")


def foreign(key: str) -> Check:
    return Check(sig(key), False, reason="does not verify against this plan's digest")


def test_a_principal_counts_once_however_many_signatures() -> None:
    checks = [good("a1", "alice"), good("a2", "alice"), good("a1", "alice")]
    count = count_signers(checks, 1)
    assert count.principals == ("alice",) and count.met
    assert not count_signers(checks, 2).met


def test_invalid_signatures_never_count() -> None:
    count = count_signers([foreign("x"), revoked("b1", "bob"), good("a1", "alice")], 2)
    assert count.principals == ("alice",)
    assert not count.met
    assert [c.signature.key for c in count.rejected] == ["SHA256:x", "SHA256:b1"]


def test_a_revoked_key_does_not_count_even_beside_a_valid_one_of_another() -> None:
    assert count_signers([revoked("b1", "bob")], 1) == Count((), 1, (revoked("b1", "bob"),))
    assert not count_signers([revoked("b1", "bob")], 1).met


def test_a_valid_signature_without_a_principal_does_not_count() -> None:
    # check_signature's verdict (well formed, nobody vouched): not a signer.
    assert count_signers([Check(sig("n"), True)], 1).principals == ()


def test_exactly_the_minimum_passes_one_fewer_refuses() -> None:
    checks = [good("c", "carol"), good("a", "alice"), good("b", "bob")]
    assert count_signers(checks, 3).met
    assert not count_signers(checks, 4).met
    assert count_signers(checks[:2], 2).met
    assert not count_signers(checks[:1], 2).met
    assert count_signers(checks, 3).principals == ("alice", "bob", "carol")  # sorted
    assert not count_signers([], 1).met


def test_a_minimum_below_one_is_a_bug_not_a_pass() -> None:
    for minimum in (0, -1):
        with pytest.raises(ValueError, match="at least 1"):
            count_signers([], minimum)


# The gates: each counts with count_signers and says so in its own words.

def stub_verify(monkeypatch: pytest.MonkeyPatch, module: object,
                checks: dict[str, Check]) -> None:
    def verify(digest: str, signature: Signature, allowed: Path,
               revoked_keys: Path | None = None) -> Check:
        return checks[signature.key]
    monkeypatch.setattr(module, "verify", verify)


def test_the_policy_gate_counts_principals(monkeypatch: pytest.MonkeyPatch) -> None:
    rules = policy.Policy(2, "alice ssh-ed25519 AAAA\nbob ssh-ed25519 BBBB\n")
    checks = {c.signature.key: c for c in (good("a1", "alice"), good("a2", "alice"),
                                            revoked("b1", "bob"))}
    stub_verify(monkeypatch, policy, checks)
    with pytest.raises(policy.PolicyError) as refused:
        policy.enforce(rules, "sha256:x", [c.signature for c in checks.values()])
    assert str(refused.value) == (
        "the cluster's signature policy (on its controllers) needs 2 signature(s) from "
        "alice, bob; this plan has 1 (alice): have it signed (cargoship sign PLAN --key KEY "
        "[--detached]); nothing was changed")
    checks["SHA256:b2"] = good("b2", "bob")
    assert policy.enforce(rules, "sha256:x", [c.signature for c in checks.values()]) == \
        ["alice", "bob"]
    none = policy.Policy(1, rules.allowed_signers)
    with pytest.raises(policy.PolicyError, match=r"needs 1 signature.*this plan has 0: have"):
        policy.enforce(none, "sha256:x", [checks["SHA256:b1"].signature])


def require_args(tmp_path: Path, minimum: int) -> argparse.Namespace:
    allowed = tmp_path / "allowed_signers"
    allowed.write_text("")
    return argparse.Namespace(min_signatures=minimum, require_signed_by=allowed,
                              revoked_keys=None, json=False,
                              plan=tmp_path / "plan.json")


def test_the_flag_gate_counts_principals(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    checks = {c.signature.key: c for c in (good("a1", "alice"), good("a2", "alice"),
                                            revoked("b1", "bob"), foreign("x"))}
    stub_verify(monkeypatch, signing, checks)
    plan = sample_plan()
    found = [c.signature for c in checks.values()]
    args = require_args(tmp_path, 2)
    with pytest.raises(CargoshipError) as refused:
        apply_command.require_signatures(plan, args, found)
    assert str(refused.value) == (
        f"plan {plan.plan_id} has 1 valid signature(s) from {args.require_signed_by}, 2 "
        f"required (looked in the plan and in {tmp_path}/*.cargoship-sig) "
        "(SHA256:b1: key SHA256:b1 is revoked; SHA256:x: does not verify against "
        "this plan's digest); nothing was changed")
    assert apply_command.require_signatures(plan, require_args(tmp_path, 1), found) == ["alice"]
    assert capsys.readouterr().out == "Signed by alice: accepted\n"


def test_signed_for_real_revoked_and_duplicate_keys(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """With ssh-keygen: alice's two keys count once, bob's revoked key not at all."""
    from planner.plan.codec import plan_digest

    keys = {}
    for name in ("alice1", "alice2", "bob"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f",
                        str(tmp_path / name)], check=True)
        keys[name] = (tmp_path / f"{name}.pub").read_text().split()
    allowed = tmp_path / "allowed_signers"
    allowed.write_text("".join(f"{name.rstrip('12')} {k[0]} {k[1]}\n"
                               for name, k in keys.items()))
    revoked_file = tmp_path / "revoked"
    revoked_file.write_text(" ".join(keys["bob"][:2]) + "\n")
    plan = sample_plan()
    signatures = [signing.sign(plan_digest(plan), tmp_path / n) for n in keys]
    args = argparse.Namespace(min_signatures=2, require_signed_by=allowed,
                              revoked_keys=revoked_file, json=False,
                              plan=tmp_path / "plan.json")
    with pytest.raises(CargoshipError, match=r"has 1 valid signature\(s\) from .*, 2 "
                                             r"required \(looked in the plan and in \S+\) "
                                             r"\(SHA256:\S+: key \S+ is revoked\)"):
        apply_command.require_signatures(plan, args, signatures)
    args.min_signatures = 1
    assert apply_command.require_signatures(plan, args, signatures) == ["alice"]
    args.revoked_keys = None
    args.min_signatures = 2
    assert apply_command.require_signatures(plan, args, signatures) == ["alice", "bob"]
    capsys.readouterr()
