"""`cargoship signature-policy`: show, set or replace the cluster's signature policy on
its controllers (executor/policy.py says why it lives there)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from executor.connect import connect_all
from executor.policy import (
    POLICY,
    Policy,
    PolicyError,
    agreed,
    approve,
    read,
    stamped,
    write_script,
)
from executor.remote import HostWriter
from planner.config import load_config
from planner.errors import CargoshipError
from planner.facts.lock_holder import whoami
from planner.hosts.ssh import ConnectOptions
from planner.render import printable


def _describe(policy: Policy | None) -> str:
    if policy is None:
        return "no signature policy: apply enforces only the flags it is given"
    return (f"{policy.min_signatures} signature(s) from {', '.join(policy.principals())} "
            f"(policy {policy.digest}, set {policy.set_at or '?'} by {policy.set_by or '?'})")


def signature_policy_command(config_path: Path, allowed: Path | None, minimum: int | None,
                             approvals: Path | None, confirmed: bool) -> int:
    config = load_config(config_path, secrets=False)
    controllers = [h for h in config.hosts if h.role == "controller"]
    if not controllers:
        raise CargoshipError("the config has no controller to keep the policy on")
    if (allowed is None) != (minimum is None):
        raise CargoshipError("--allowed-signers and --min-signatures go together")
    options = ConnectOptions(connect_timeout=config.options.connect_timeout)
    connected = connect_all(dataclasses.replace(config, hosts=tuple(controllers)), options)
    writers = [c for c in connected if isinstance(c, HostWriter)]
    try:
        failures = [str(c) for c in connected if isinstance(c, Exception)]
        if failures:
            raise CargoshipError("cannot reach every controller: " + "; ".join(failures))
        current = agreed({w.label: read(w) for w in writers})
        if allowed is None or minimum is None:
            print(printable(f"Signature policy on {len(writers)} controller(s): "
                            f"{_describe(current)}"))
            return 0
        new = _new_policy(allowed, minimum)
        approved: list[str] = []
        if current is not None and current.digest != new.digest:
            signatures = sorted(approvals.glob("*.sig")) if approvals else []
            approved = approve(current, new, signatures)
        print(printable(f"New policy: {_describe(new)}"))
        if current is not None and current.digest == new.digest:
            print("The controllers hold this policy already; nothing was changed.")
            return 0
        if not confirmed:
            print(f"Nothing was changed: add --confirm to write it to {POLICY} on "
                  f"{', '.join(w.label for w in writers)}.")
            return 1
        text = stamped(new, whoami()).to_json().encode()
        for writer in writers:
            writer.run_root(write_script(), stdin=text)
        by = f", approved by {', '.join(approved)}" if approved else ""
        print(printable(f"Wrote the signature policy to {len(writers)} controller(s){by}."))
        return 0
    except PolicyError as exc:
        raise CargoshipError(str(exc)) from None
    finally:
        for writer in writers:
            writer.close()
        options.close()


def _new_policy(allowed: Path, minimum: int) -> Policy:
    if minimum < 1:
        raise CargoshipError("--min-signatures: expected a number >= 1")
    try:
        text = allowed.read_bytes()[:65536].decode()
    except (OSError, UnicodeDecodeError) as exc:
        raise CargoshipError(f"{allowed}: cannot read the allowed-signers file: {exc}") \
            from None
    policy = Policy(minimum, text)
    if len(policy.principals()) < minimum:
        raise CargoshipError(f"{allowed} names {len(policy.principals())} signer(s), fewer "
                             f"than --min-signatures {minimum}")
    return policy

