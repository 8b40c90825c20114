"""`cargoship apply` (and the apply half of `engine-config-sync --confirm`) and `cargoship
sign`: a saved plan checked, approved (signatures, a person's 'yes'), applied, reported."""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
import time
from typing import TYPE_CHECKING, Any

from cargoship.habits import make_dir, to_devnull
from cargoship.show_command import as_record, print_plan, verdict
from planner.errors import CargoshipError
from planner.render import printable

if TYPE_CHECKING:
    from executor.apply_result import ApplyResult
    from planner.plan.model import Plan, Signature


def apply(args: argparse.Namespace) -> int:
    from cargoship import json_output

    if not getattr(args, "json", False):
        return _apply_checked(args)
    try:
        return _apply_checked(args)
    except CargoshipError as exc:
        error = "; ".join([str(exc), *getattr(exc, "details", ())])
        json_output.emit(json_output.apply_refused(args.plan, getattr(args, "plan_id", None),
                                                    printable(error)))
        raise


def _apply_checked(args: argparse.Namespace) -> int:
    # The executor brings the Kubernetes client (~0.5 s to import): only for commands
    # that apply, not for every plan.
    from cargoship.lockwait import LockWait
    from cargoship.progress import Progress
    from executor.apply import apply as apply_plan
    from executor.waits import from_environment

    waits = from_environment()  # the defaults, but in cargoship's own tests (waits.py)
    as_json = getattr(args, "json", False)
    if args.lock_timeout < 0:
        raise CargoshipError("--lock-timeout: expected a number of seconds >= 0")
    plan = _read_plan(args)
    if not plan.changes and not plan.unassessed and not as_json:
        print("No changes. Nothing to apply.")
        print(f"Plan {plan.plan_id} has nothing to change on any host; nothing was changed.")
        return 0
    approved = _approve(args, plan)
    if approved is None:
        print("Apply cancelled; nothing was changed.")
        return 1
    signers, counted = approved
    waiting = LockWait(args.lock_timeout)
    started = time.monotonic()
    try:
        # The plan that was checked and shown is the one applied: the path is not read
        # again.
        result = apply_plan(plan, args.plan, lock_timeout=args.lock_timeout,
                            progress=Progress(sys.stderr if as_json else sys.stdout),
                            on_lock_wait=waiting, signers=signers, signatures=counted,
                            waits=waits)
    finally:
        waiting.done()
    return _report(args, result, time.monotonic() - started)


def _read_plan(args: argparse.Namespace) -> Plan:
    """The plan file, read once (what is checked is what is applied), refused before
    anything is asked when it is bad or is an apply record."""
    from planner.plan import codec

    raw = codec.read_bytes(args.plan)
    record = as_record(raw)
    if record is not None:
        plan_of = args.plan.with_name(args.plan.name.removesuffix(".applied.json") + ".json")
        raise CargoshipError(
            f"{args.plan} is the apply record of plan {record.get('plan_id')} "
            f"({verdict(record)}), not a plan: see it with `cargoship show {args.plan}`; to "
            f"apply a plan, give its plan file (`cargoship apply {plan_of}`), or make a new "
            "one with `cargoship plan -c CLUSTER.yaml -out PLAN.json`")
    plan = codec.loads(raw, args.plan)
    args.plan_id = plan.plan_id  # for a refusal's JSON: the path is never read twice
    return plan


def _approve(args: argparse.Namespace,
             plan: Plan) -> tuple[list[str], list[Signature]] | None:
    """(verified signers, detached signatures counted), or None: a person said no."""
    # engine-config-sync --confirm comes here too, without the signature options.
    signers: list[str] = []  # verified principals only; an unchecked signature is no signer
    # Detached signatures beside the plan (or in --signatures): the controllers' policy
    # counts them whatever the flags (executor/policy.py), and records keep them.
    counted = _detached(plan, args)
    if getattr(args, "require_signed_by", None) is not None:
        signers = require_signatures(plan, args, counted)
    if not args.confirm:
        if not sys.stdin.isatty():
            raise CargoshipError("refusing to apply without --confirm (stdin is not a "
                                 "terminal to ask on)")
        print_plan(args, plan)
        answer = input(f"\nApply plan {plan.plan_id}? Only 'yes' is accepted: ")
        if answer.strip() != "yes":
            return None
    return signers, counted


def _report(args: argparse.Namespace, result: ApplyResult, seconds: float) -> int:
    from cargoship import json_output
    from cargoship.outcome import apply_outcome_lines

    code = 128 + (result.signum or signal.SIGINT) if result.interrupted else \
        (0 if result.ok else 1)
    try:
        if getattr(args, "json", False):
            json_output.emit(json_output.apply_result(result))
            return code
        print()
        print("\n".join(apply_outcome_lines(result, seconds)))
        said = "applied" if result.ok else ("interrupted" if result.interrupted else "FAILED")
        print(f"Plan {result.plan.plan_id} {said}; record: "
              f"{result.record or 'not written here (see the warning above)'}")
        if result.interrupted:
            print(f"Hosts not reached are left as they were: run `cargoship apply "
                  f"{args.plan} --confirm` again to finish them (after the usual drift "
                  "check).")
        sys.stdout.flush()
    except OSError:
        # The terminal went away (SIGHUP): the records say what happened; the exit code
        # still does.
        to_devnull()
    return code


def sign(args: argparse.Namespace) -> int:
    from planner.plan import codec, detached, signing
    from planner.plan.codec import plan_digest

    plan = codec.read(args.plan)
    signature = signing.sign(plan_digest(plan), args.key.expanduser())
    if args.detached:
        directory = args.sig_dir or args.plan.parent
        make_dir(directory)
        path = detached.write(plan, plan_digest(plan), signature, directory)
        print(f"Signed plan {plan.plan_id} with {signature.key} "
              f"({signature.comment or 'no comment'}): {path}")
        return 0
    if args.sig_dir is not None:
        raise CargoshipError("--sig-dir: only with --detached")
    kept = tuple(s for s in plan.signatures if s.key != signature.key)
    codec.write(dataclasses.replace(plan, signatures=(*kept, signature)), args.plan)
    print(f"Signed plan {plan.plan_id} with {signature.key} ({signature.comment or 'no comment'}"
          f"); {len(kept) + 1} signature(s) now")
    return 0


def _detached(plan: Plan, args: argparse.Namespace) -> list[Any]:
    from planner.plan import detached
    from planner.plan.codec import plan_digest

    folder = getattr(args, "signatures", None) or (
        args.plan.parent if getattr(args, "plan", None) else None)
    if folder is None:
        return []
    return list(detached.read(plan, plan_digest(plan), folder))


def require_signatures(plan: Plan, args: argparse.Namespace,
                       detached: list[Any]) -> list[str]:
    """The principals (from the allowed-signers file) of the plan's valid signatures,
    embedded or `detached` (as _detached read them); refuses the plan when there are fewer
    than --min-signatures."""
    from planner.plan import signing
    from planner.plan.codec import plan_digest
    from planner.plan.signers import count_signers

    if args.min_signatures < 1:
        raise CargoshipError("--min-signatures: expected a number >= 1")
    if not args.require_signed_by.exists():
        raise CargoshipError(f"{args.require_signed_by}: no such allowed-signers file")
    digest = plan_digest(plan)
    found = (*plan.signatures, *detached)
    count = count_signers((signing.verify(digest, s, args.require_signed_by,
                                          args.revoked_keys) for s in found),
                          args.min_signatures)
    if not count.met:
        details = "; ".join(f"{c.signature.key}: {c.reason}" for c in count.rejected)
        raise CargoshipError(
            f"plan {plan.plan_id} has {len(count.principals)} valid signature(s) from "
            f"{args.require_signed_by}, {args.min_signatures} required (looked in the plan "
            f"and in {getattr(args, 'signatures', None) or args.plan.parent}"
            f"/*.cargoship-sig)"
            + (f" ({details})" if details else "") + "; nothing was changed")
    # With --json, stdout carries only the JSON document.
    print(f"Signed by {', '.join(count.principals)}: accepted", flush=True,
          file=sys.stderr if getattr(args, "json", False) else sys.stdout)
    return list(count.principals)
