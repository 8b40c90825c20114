"""`cargoship show`: a plan file (or an apply record) for people, for machines or for a pull
request; and the plan text that plan and apply print too."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cargoship.habits import make_dir
from planner.errors import CargoshipError
from planner.localfiles import atomic_write
from planner.render import printable

if TYPE_CHECKING:
    from planner.plan.model import Plan, Signature
    from planner.render.text import View


def show(args: argparse.Namespace) -> int:
    from planner.plan import codec
    from planner.render import render_markdown

    raw = codec.read_bytes(args.plan)  # one read: what is shown is what was checked
    record = as_record(raw)
    if record is not None:
        return _show_record(record, args.json)
    plan = codec.loads(raw, args.plan)
    if args.json:
        sys.stdout.write(codec.dumps(plan))
        return 0
    if args.markdown and args.split_dir:
        return _split_markdown(args, plan)
    if args.markdown:
        sys.stdout.write(render_markdown(plan, view(args)))
    else:
        print_plan(args, plan)
    lines = _signature_lines(plan, args.plan, args.allowed_signers, args.signatures)
    if args.markdown:
        lines = [f"- {line.strip()}" if line.startswith("  ") else line for line in lines]
    sys.stdout.write("\n" + "\n".join(lines) + "\n")
    return 0


def _split_markdown(args: argparse.Namespace, plan: Plan) -> int:
    from planner.render import render_markdown, split_markdown

    text = render_markdown(plan, view(args)) + "\n" + "\n".join(
        _signature_lines(plan, args.plan, args.allowed_signers, args.signatures)) + "\n"
    make_dir(args.split_dir)
    for number, part in enumerate(split_markdown(text), 1):
        atomic_write(args.split_dir / f"plan-{number}.md", part.encode())
        print(args.split_dir / f"plan-{number}.md")
    return 0


def view(args: argparse.Namespace, color: bool = False) -> View:
    """Compact unless asked: `plan --verbose`, `show --full`; diffs with `--diff`."""
    from planner.render.text import View

    return View(full=bool(getattr(args, "full", False) or (
                    args.command in ("plan", "engine-config-sync")
                    and getattr(args, "verbose", False))),
                diff=bool(getattr(args, "diff", False)), color=color)


def print_plan(args: argparse.Namespace, plan: Plan) -> None:
    from planner.render.text import render_text

    color = not args.no_color and "NO_COLOR" not in os.environ and sys.stdout.isatty()
    sys.stdout.write(render_text(plan, view(args, color)))


def as_record(raw: bytes) -> dict[str, Any] | None:
    """An apply record (PLAN.applied.json), or None for anything else (a plan, or junk the
    plan reader will explain)."""
    from planner.plan import codec

    try:
        data = json.loads(raw[: codec.MAX_PLAN_BYTES])
    except (ValueError, RecursionError):  # the plan reader explains
        return None
    if isinstance(data, dict) and "applied_at" in data and "format_version" not in data:
        return data
    return None


def verdict(record: dict[str, Any]) -> str:
    return "applied" if record.get("ok") else (
        "in progress, or killed (no apply rewrote this record, written before its first "
        "change)" if record.get("outcome") == "in progress" else
        "interrupted" if record.get("interrupted") else "FAILED")


def _show_record(record: dict[str, Any], as_json: bool) -> int:
    from cargoship.housekeeping import where_of
    from cargoship.outcome import host_counts, log_lines

    if as_json:
        sys.stdout.write(json.dumps(record, indent=2, sort_keys=True) + "\n")
        return 0
    lines = [f"apply record of plan {record.get('plan_id')} (cluster {record.get('cluster')}): "
             f"{verdict(record)}",
             f"  applied {record.get('applied_at')} by {record.get('applied_by')} with cargoship "
             f"{record.get('cargoship_version')}"]
    if _listed(record, "signers"):
        lines.append(f"  signed by {', '.join(map(str, _listed(record, 'signers')))}")
    restarts = record.get("restarts")
    # As apply ended: what happened, a rollback's restarts included.
    lines.append("  " + ", ".join(host_counts(
        [str(h.get("status")) for h in _hosts(record)],
        restarts if isinstance(restarts, int) and not isinstance(restarts, bool) else None)))
    for h in _hosts(record):
        lines.append(f"  {where_of(h.get('host'))}: {h.get('status')}"
                     + (f": {h.get('detail')}" if h.get("detail") else ""))
        lines += log_lines(h.get("log"))
    lines += [f"  {where_of(c.get('host'))}: {c.get('action')} {c.get('target') or ''}: "
              f"{c.get('status')}" for c in _listed(record, "changes") if isinstance(c, dict)]
    lines += [f"  note: {note}" for note in _listed(record, "notes")]
    # A record is a file anyone may have edited: its text is shown, never obeyed.
    print(printable("\n".join(lines)))
    return 0


def _listed(record: dict[str, Any], key: str) -> list[Any]:
    """A record's list, or none: a record is a file anyone may have edited."""
    value = record.get(key)
    return value if isinstance(value, list) else []


def _hosts(record: dict[str, Any]) -> list[dict[str, Any]]:
    """A record's hosts: a list of {host, status, detail} (a dict by label before 2.0)."""
    hosts = record.get("hosts", [])
    if isinstance(hosts, dict):
        return [{"host": {"name": k}, **v} for k, v in sorted(hosts.items())
                if isinstance(v, dict)]
    return [h for h in hosts if isinstance(h, dict)] if isinstance(hosts, list) else []


def _signature_lines(plan: Plan, path: Path, allowed: Path | None = None,
                     folder: Path | None = None) -> list[str]:
    """Each signature by its key, and whom it is from only where an allowed-signers file
    says so: a key's comment is whatever its maker typed, never an identity."""
    from planner.plan import detached
    from planner.plan.codec import plan_digest

    if allowed is not None and not allowed.is_file():
        raise CargoshipError(f"{allowed}: no such allowed-signers file")
    digest = plan_digest(plan)
    # Detached signatures beside the plan count as much as embedded ones: show them too.
    found = plan.signatures + tuple(detached.read(plan, digest, folder or path.parent))
    if not found:
        return ["Signatures: none"]
    lines = [f"Signatures ({len(found)}):"]
    for signature in found:
        lines.append(f"  key {signature.key}, signed {signature.signed_at}: "
                     f"{_signature_verdict(digest, signature, allowed)}")
    return lines


def _signature_verdict(digest: str, signature: Signature, allowed: Path | None) -> str:
    from planner.plan import signing

    if allowed is None:
        check = signing.check_signature(digest, signature)
        return ("well formed, by an unverified key (not checked against an allowed-signers "
                "file: show --allowed-signers FILE)") if check.valid \
            else f"INVALID: {check.reason}"
    check = signing.verify(digest, signature, allowed)
    return f"valid and trusted: {check.principal} (per {allowed})" if check.valid \
        else f"NOT TRUSTED: {check.reason}"
