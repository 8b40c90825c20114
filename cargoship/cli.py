"""The `cargoship` command.

Exit codes: 0 success, 1 error (one line per problem on stderr, never a traceback),
130 interrupted.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cargoship.completion import SHELLS
from cargoship.habits import (
    check_writable,
    config_path,
    did_you_mean,
    setup_logging,
    terraform_hint,
)
from cargoship.heartbeat import heartbeat
from executor.errors import ApplyInterrupted
from planner import __version__
from planner.config import load_config
from planner.errors import CargoshipError, ConfigError
from planner.hosts.ssh import ConnectOptions
from planner.localfiles import LocalFileError, atomic_write
from planner.make import make_plan
from planner.render import printable

# What a plan needs only once its hosts' handshakes have begun is imported where it is used,
# so that it loads while they run (planner/make.py); other commands pay only
# for what they use too.
if TYPE_CHECKING:
    from planner.dryrun import DryRunReport
    from planner.plan.model import Plan
    from planner.render.text import View

EXAMPLES = {
    "plan": "examples:\n  cargoship plan -c cluster.yaml\n"
            "  cargoship plan -c cluster.yaml -out plan.json --detailed-exitcode\n",
    "show": "examples:\n  cargoship show plan.json\n  cargoship show plan.json --markdown\n",
    "engine-config-sync": "example:\n  cargoship engine-config-sync -c cluster.yaml --dry-run\n",
    "validate": "example:\n  cargoship validate -c cluster.yaml\n",
    "schema": "examples:\n  cargoship schema > cluster.schema.json\n"
              "  cargoship schema --plan > plan.schema.json\n",
    "apply": "examples:\n  cargoship apply plan.json --confirm\n"
             "  cargoship apply plan.json --confirm --lock-timeout 600\n",
    "sign": "examples:\n  cargoship sign plan.json --key ~/.ssh/id_ed25519\n"
            "  cargoship sign plan.json --key ~/.ssh/id_ed25519 --detached --sig-dir sigs/\n"
            "  cargoship apply plan.json --confirm --require-signed-by allowed_signers "
            "--min-signatures 2\n",
    "history": "example:\n  cargoship history -c cluster.yaml\n",
    "signature-policy": "examples:\n  cargoship signature-policy -c cluster.yaml\n"
                        "  cargoship signature-policy -c cluster.yaml --allowed-signers "
                        "allowed_signers --min-signatures 2 --confirm\n",
    "completion": "examples:\n  eval \"$(cargoship completion bash)\"\n"
                  "  source <(cargoship completion zsh)\n"
                  "  cargoship completion fish | source\n",
    "force-unlock": "example (the lock id is in the error that named the holder; asks "
                    "before removing, unless --confirm):\n"
                    "  cargoship force-unlock -c cluster.yaml 3f9c2a1b\n",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse's default prints usage over several lines; keep it to one line + hint.
        hint = did_you_mean(build_parser(), message, None)
        self.exit(1, f"cargoship: error: {message}{hint} (see '{self.prog} --help')\n")


def _global_options(parser: argparse.ArgumentParser, top: bool) -> None:
    # Also on every subcommand, so `cargoship plan -v` works like `cargoship -v plan`; a
    # subcommand's copy leaves the value alone unless given (SUPPRESS).
    default: dict[str, object] = {} if top else {"default": argparse.SUPPRESS}
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="cargoship's debug logs on stderr; with plan, also every host's "
                             "preflight detail and the unified diffs", **default)  # type: ignore[arg-type]
    parser.add_argument("--log-file", type=Path, metavar="FILE",
                        help="also write debug logs to FILE (secrets are never logged)",
                        **default)  # type: ignore[arg-type]
    parser.add_argument("--no-color", action="store_true",
                        help="no colours (also off when NO_COLOR is set or not on a terminal)",
                        **default)  # type: ignore[arg-type]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="cargoship", description="Keep the engine config of RKE2 and k3s "
                     "clusters in sync across every host, plan first.")
    parser.add_argument("--version", action="version", version=f"cargoship {__version__}")
    _global_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def command(name: str, help_text: str, config: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text, epilog=EXAMPLES[name],
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        if config:
            p.add_argument("-c", "--config", type=Path, metavar="FILE",
                           help="the cluster config (default: $CARGOSHIP_CONFIG, else "
                                "./cluster.yaml)")
        _global_options(p, top=False)
        return p

    for name, help_text in (
        ("plan", "Read every host (read-only) and report what engine-config-sync would do."),
        ("engine-config-sync", "Sync the engine config; with --dry-run, report only."),
    ):
        p = command(name, help_text)
        p.add_argument("--accept-new-host-keys", action="store_true",
                       help="trust and record host keys never seen before (changed keys are "
                            "always refused)")
        if name == "engine-config-sync":
            mode = p.add_mutually_exclusive_group(required=True)
            mode.add_argument("--dry-run", action="store_true",
                              help="connect and run the preflight, report the rest, change "
                                   "nothing")
            mode.add_argument("--confirm", action="store_true",
                              help="plan and apply in one run (the plan is kept in "
                                   "$XDG_STATE_HOME/cargoship/plans/, by default "
                                   "~/.local/state/cargoship/plans/)")
            p.add_argument("--lock-timeout", type=float, default=0.0, metavar="SECONDS",
                           help="wait this long for another run's lock")
        else:
            p.add_argument("-out", "--out", type=Path, metavar="PLAN",
                           help="write the plan file (JSON) for a later apply or review")
            p.add_argument("--detailed-exitcode", action="store_true",
                           help="exit 0 when nothing would change, 2 when something would, "
                                "1 on error")
            p.add_argument("--json", action="store_true",
                           help="print the plan document (schemas/plan.schema.json) on stdout "
                                "instead of the text for people")
            p.add_argument("--stats", action="store_true",
                           help="also print, per phase, the remote commands run per host, "
                                "the time taken, and this run's CPU time, peak memory and "
                                "start-up")
            # (The global -v/--verbose also shows every host's preflight detail and the
            # unified diffs here: see _view.)
            p.add_argument("--diff", action="store_true",
                           help="the unified diff under each change's summary by key")
    show = command("show", "Render a saved plan (checks its schema and digest first); offline.",
                   config=False)
    show.add_argument("plan", type=Path, metavar="PLAN", help="a plan file from plan -out")
    fmt = show.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="the plan as JSON, for machines")
    fmt.add_argument("--markdown", action="store_true", help="markdown for a pull request")
    show.add_argument("--full", action="store_true",
                      help="every host's preflight detail and the unified diffs")
    show.add_argument("--diff", action="store_true",
                      help="the unified diff under each change's summary by key")
    show.add_argument("--allowed-signers", type=Path, metavar="FILE",
                      help="say which signatures are valid and trusted: by whom, as this "
                           "OpenSSH allowed_signers file names them")
    show.add_argument("--signatures", type=Path, metavar="DIR",
                      help="also check the detached signatures (*.cargoship-sig) in DIR "
                           "(default: beside the plan)")
    show.add_argument("--split-dir", type=Path, metavar="DIR",
                      help="with --markdown: write parts under 65,000 characters to "
                           "DIR/plan-N.md (one pull-request comment each)")
    validate = command("validate", "Check the cluster config (schema and consistency); no "
                       "connections.")
    validate.add_argument("--json", action="store_true",
                          help="the verdict as JSON (schemas/validate-output.schema.json)")
    apply = command("apply", "Apply exactly a saved plan: lock, drift check, roll out, "
                    "record.", config=False)
    apply.add_argument("plan", type=Path, metavar="PLAN", help="a plan file from plan -out")
    apply.add_argument("--json", action="store_true",
                       help="the outcome as JSON on stdout (schemas/apply-output.schema.json); "
                            "progress goes to stderr")
    apply.add_argument("--confirm", action="store_true",
                       help="apply without asking (otherwise type 'yes' on a terminal)")
    apply.add_argument("--lock-timeout", type=float, default=0.0, metavar="SECONDS",
                       help="wait this long for another run's lock (default: fail at once)")
    apply.add_argument("--require-signed-by", type=Path, metavar="ALLOWED_SIGNERS",
                       help="refuse a plan without enough valid signatures from the signers "
                            "in this OpenSSH allowed_signers file")
    apply.add_argument("--min-signatures", type=int, default=1, metavar="N",
                       help="with --require-signed-by: how many different signers (default 1)")
    apply.add_argument("--revoked-keys", type=Path, metavar="FILE",
                       help="with --require-signed-by: keys (or a KRL) that no longer count")
    apply.add_argument("--signatures", type=Path, metavar="DIR",
                       help="with --require-signed-by: also count the detached signatures "
                            "(*.cargoship-sig) in DIR (default: beside the plan)")
    sign = command("sign", "Add your SSH signature to a plan (over its digest).",
                   config=False)
    sign.add_argument("plan", type=Path, metavar="PLAN", help="a plan file from plan -out")
    sign.add_argument("--key", type=Path, required=True, metavar="SSH_PRIVATE_KEY",
                      help="the private key to sign with (ssh-agent keys: give the .pub)")
    sign.add_argument("--detached", action="store_true",
                      help="leave the plan as it is; write the signature to its own small "
                           "file (PLAN_ID.KEY.cargoship-sig) for a pull request")
    sign.add_argument("--sig-dir", type=Path, metavar="DIR",
                      help="with --detached: where to write it (default: beside the plan)")
    schema = command("schema", "Print the JSON Schema of the cluster config (for editors) or "
                     "of the plan file.", config=False)
    schema.add_argument("--plan", action="store_true", help="the plan file's schema")
    completion = command("completion", "Print a shell completion script.", config=False)
    completion.add_argument("shell", choices=list(SHELLS))
    hist = command("history", "List the plans applied to the hosts (from their apply "
                   "records), and whether the hosts still match.")
    hist.add_argument("--json", action="store_true",
                      help="as JSON (schemas/history-output.schema.json)")
    hist.add_argument("--allowed-signers", type=Path, metavar="FILE",
                      help="verify the signatures the records carry over each plan's digest "
                           "(OpenSSH allowed-signers); without it no signer is shown")
    policy = command("signature-policy", "Show, set or replace the signature policy every "
                     "apply of the cluster enforces (kept on its controllers).")
    policy.add_argument("--allowed-signers", type=Path, metavar="FILE",
                        help="the signers whose signatures count (OpenSSH allowed-signers)")
    policy.add_argument("--min-signatures", type=int, metavar="N",
                        help="how many of them every plan needs")
    policy.add_argument("--approvals", type=Path, metavar="DIR",
                        help="replacing a policy: *.sig files, the current signers' "
                             "ssh-keygen -Y signatures (namespace cargoship-policy) over the "
                             "new policy's digest")
    policy.add_argument("--confirm", action="store_true",
                        help="write it (otherwise show what would be written)")
    unlock = command("force-unlock", "Remove the lock a crashed run left behind.")
    unlock.add_argument("lock_id", metavar="LOCK_ID", help="the id of the lock to remove")
    unlock.add_argument("--confirm", action="store_true",
                        help="remove without asking (otherwise type 'yes' on a terminal)")
    return parser


def run() -> int:
    """The `cargoship` command: main(), then an exit with nothing left to collect.

    The process ends right after main() returns, so its objects need no cycle collection;
    the interpreter's exit still ran one over every imported module's objects: 0.04-0.06 s
    of CPU per command (paramiko's alone 0.03 s), 0.01 s once they are frozen. Nothing
    waits for a collection to finish it: files are written and closed inside `with`
    blocks, log handlers are flushed by logging's own exit hook, and the interpreter
    flushes stdout and stderr whatever is frozen."""
    code = main()
    gc.freeze()
    return code


def _raise_interrupt(signum: int, frame: object) -> None:
    from executor.errors import SignalInterrupt

    raise SignalInterrupt(signum)


def _to_devnull() -> None:
    """Point stdout and stderr at /dev/null: their reader (a pipe, a terminal) is gone,
    and neither a later line nor the interpreter's final flush may fail for that."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.dup2(devnull, sys.stderr.fileno())


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr)
    except OSError:
        _to_devnull()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    hint = terraform_hint(argv)
    if hint:
        print(hint, file=sys.stderr)
        return 1
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        message = f"unrecognized arguments: {' '.join(unknown)}"
        parser.exit(1, f"cargoship: error: {message}"
                       f"{did_you_mean(parser, message, args.command)} (see 'cargoship "
                       f"{args.command} --help')\n")
    # SIGTERM (CI cancelling, `timeout`) and SIGHUP (the terminal closed) end any command as
    # Ctrl-C does, with its message and 128 + the signal; apply's rollout takes them over.
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_interrupt)
    try:
        setup_logging(args.verbose, args.log_file)
        return _dispatch(args)
    except BrokenPipeError:
        # `cargoship show plan.json | head`: the reader has what it wanted. Point stdout
        # at /dev/null so the interpreter's final flush does not complain either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except ApplyInterrupted as exc:
        _say(f"interrupted: {exc}")
        return 128 + exc.signum
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"error: {printable(str(problem))}", file=sys.stderr)
        return 1
    except CargoshipError as exc:
        # Messages may quote what a host or a file said: shown, never obeyed by a terminal.
        # The deciding reason first, in one line; any others under it, one line each.
        print(f"error: {printable(str(exc))}", file=sys.stderr)
        for detail in getattr(exc, "details", ()):
            print(f"  - {printable(str(detail))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        # A plan never changes anything; an apply outside its rollout (which handles Ctrl-C
        # itself) is interrupted before or after any change, its locks released on the way.
        changed = "" if args.command in ("apply", "engine-config-sync") else \
            "; nothing was changed on any host"
        _say(f"interrupted{changed}")
        return 128 + getattr(exc, "signum", signal.SIGINT)
    except Exception as exc:
        logging.getLogger("cargoship").debug("internal error", exc_info=True)
        print(f"error: internal error: {type(exc).__name__}: {printable(str(exc))} (run with "
              "-v for details)",
              file=sys.stderr)
        return 1


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "show":
        return _show(args)
    if args.command == "apply":
        return _apply(args)
    if args.command == "sign":
        return _sign(args)
    if args.command == "completion":
        sys.stdout.write(SHELLS[args.shell](build_parser()))
        return 0
    if args.command == "schema":
        import schemas

        name = "plan.schema.json" if args.plan else schemas.CLUSTER_SCHEMA
        sys.stdout.write(json.dumps(schemas.load(name), indent=2) + "\n")
        return 0
    args.config = config_path(args.config)
    if args.command == "validate" and args.json:
        return _validate_json(args.config)
    if args.command == "signature-policy":
        from cargoship.policy_command import signature_policy_command

        return signature_policy_command(args.config, args.allowed_signers,
                                        args.min_signatures, args.approvals, args.confirm)
    if args.command in ("validate", "force-unlock", "history"):
        from cargoship import housekeeping

        if args.command == "validate":
            return housekeeping.validate(args.config)
        if args.command == "force-unlock":
            return housekeeping.force_unlock_command(args.config, args.lock_id, args.confirm)
        return housekeeping.history_command(args.config, args.json, args.allowed_signers)
    out: Path | None = getattr(args, "out", None)
    if out is not None:
        check_writable(out)  # before any host is contacted
    config = load_config(args.config)
    one_shot = args.command == "engine-config-sync" and not args.dry_run
    if one_shot and not args.confirm:
        raise CargoshipError("engine-config-sync changes hosts: add --confirm to plan and "
                             "apply in one run, or --dry-run to only report")
    options = ConnectOptions(connect_timeout=config.options.connect_timeout,
                             accept_new_host_keys=args.accept_new_host_keys)
    made = make_plan(config, options, watch=lambda activity: heartbeat(
        sys.stderr, activity, enabled=not sys.stdout.isatty()))
    from planner.plan import codec

    plan, report = made.plan, made.report
    as_json = getattr(args, "json", False)
    if as_json:
        sys.stdout.write(codec.dumps(plan))
    else:
        _print_plan(args, plan)
    if getattr(args, "stats", False):
        _print_stats(report)
    if plan.problems:
        if out:
            print(f"cargoship: plan not written to {out}: fix the problems above first",
                  file=sys.stderr)
        return 1
    if one_shot:
        # Plan and apply in one run through the same code: the plan is kept for audit.
        out = one_shot_dir() / f"{plan.plan_id}.plan.json"
        _mkdir(out.parent)
    if out:
        codec.write(plan, out)
        print(f"\nPlan {plan.plan_id} saved to {out}; review it with: cargoship show {out}",
              file=sys.stderr if as_json else sys.stdout)
    if one_shot:
        assert out is not None
        if not plan.changes and not plan.unassessed:
            return 0
        args.plan, args.confirm = out, True
        return _apply(args)
    if getattr(args, "detailed_exitcode", False):
        return 2 if plan.changes or plan.unassessed else 0
    return 0


def one_shot_dir() -> Path:
    """Where engine-config-sync --confirm keeps its plans (and their records): the user's
    state directory, never the working directory (a repository's `.cargoship/` holds what
    CI trusts, such as allowed signers)."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "cargoship" / "plans"


def _print_stats(report: DryRunReport) -> None:
    from cargoship.stats import render_stats

    sys.stdout.write("\n" + render_stats(report))


def _apply(args: argparse.Namespace) -> int:
    from cargoship import json_output

    # The executor brings the Kubernetes client (~0.5 s to import): only for commands
    # that apply, not for every plan.
    from executor.apply import apply as apply_plan

    if getattr(args, "json", False):
        try:
            return _apply_checked(args, apply_plan)
        except CargoshipError as exc:
            error = "; ".join([str(exc), *getattr(exc, "details", ())])
            json_output.emit(json_output.apply_refused(args.plan, getattr(args, "plan_id", None),
                                                        printable(error)))
            raise
    return _apply_checked(args, apply_plan)


def _apply_checked(args: argparse.Namespace, apply_plan: Any) -> int:
    from cargoship import json_output
    from cargoship.lockwait import LockWait
    from cargoship.outcome import apply_outcome_lines
    from cargoship.progress import Progress
    from planner.plan import codec

    as_json = getattr(args, "json", False)
    if args.lock_timeout < 0:
        raise CargoshipError("--lock-timeout: expected a number of seconds >= 0")
    raw = codec.read_bytes(args.plan)  # one read: what is checked is what is applied
    record = _as_record(raw)
    if record is not None:
        plan_of = args.plan.with_name(args.plan.name.removesuffix(".applied.json") + ".json")
        raise CargoshipError(
            f"{args.plan} is the apply record of plan {record.get('plan_id')} "
            f"({_verdict(record)}), not a plan: see it with `cargoship show {args.plan}`; to "
            f"apply a plan, give its plan file (`cargoship apply {plan_of}`), or make a new "
            "one with `cargoship plan -c CLUSTER.yaml -out PLAN.json`")
    plan = codec.loads(raw, args.plan)  # refuse a bad plan before asking anything
    args.plan_id = plan.plan_id  # for a refusal's JSON: the path is never read twice
    if not plan.changes and not plan.unassessed and not as_json:
        print("No changes. Nothing to apply.")
        print(f"Plan {plan.plan_id} has nothing to change on any host; nothing was changed.")
        return 0
    # engine-config-sync --confirm comes here too, without the signature options.
    signers: list[str] = []  # verified principals only; an unchecked signature is no signer
    # Detached signatures beside the plan (or in --signatures): the controllers' policy
    # counts them whatever the flags (executor/policy.py), and records keep them.
    counted = _detached(plan, args)
    if getattr(args, "require_signed_by", None) is not None:
        signers = _require_signatures(plan, args, counted)
    if not args.confirm:
        if not sys.stdin.isatty():
            raise CargoshipError("refusing to apply without --confirm (stdin is not a "
                                 "terminal to ask on)")
        _print_plan(args, plan)
        answer = input(f"\nApply plan {plan.plan_id}? Only 'yes' is accepted: ")
        if answer.strip() != "yes":
            print("Apply cancelled; nothing was changed.")
            return 1

    waiting = LockWait(args.lock_timeout)
    started = time.monotonic()
    try:
        # The plan that was checked and shown is the one applied: the path is not read
        # again.
        result = apply_plan(plan, args.plan, lock_timeout=args.lock_timeout,
                            progress=Progress(sys.stderr if as_json else sys.stdout),
                            on_lock_wait=waiting, signers=signers, signatures=counted)
    finally:
        waiting.done()
    code = 128 + (result.signum or signal.SIGINT) if result.interrupted else \
        (0 if result.ok else 1)
    try:
        if as_json:
            json_output.emit(json_output.apply_result(result))
            return code
        print()
        print("\n".join(apply_outcome_lines(result, time.monotonic() - started)))
        verdict = "applied" if result.ok else ("interrupted" if result.interrupted
                                               else "FAILED")
        print(f"Plan {result.plan.plan_id} {verdict}; record: "
              f"{result.record or 'not written here (see the warning above)'}")
        if result.interrupted:
            print(f"Hosts not reached are left as they were: run `cargoship apply "
                  f"{args.plan} --confirm` again to finish them (after the usual drift "
                  "check).")
        sys.stdout.flush()
    except OSError:
        # The terminal went away (SIGHUP): the records say what happened; the exit code
        # still does.
        _to_devnull()
    return code


def _sign(args: argparse.Namespace) -> int:
    from planner.plan import codec, detached, signing
    from planner.plan.codec import plan_digest

    plan = codec.read(args.plan)
    signature = signing.sign(plan_digest(plan), args.key.expanduser())
    if args.detached:
        directory = args.sig_dir or args.plan.parent
        _mkdir(directory)
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


def _require_signatures(plan: Plan, args: argparse.Namespace,
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


def _as_record(raw: bytes) -> dict[str, Any] | None:
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


def _verdict(record: dict[str, Any]) -> str:
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
    verdict = _verdict(record)
    lines = [f"apply record of plan {record.get('plan_id')} (cluster {record.get('cluster')}): "
             f"{verdict}",
             f"  applied {record.get('applied_at')} by {record.get('applied_by')} with cargoship "
             f"{record.get('cargoship_version')}"]
    if record.get("signers"):
        lines.append(f"  signed by {', '.join(map(str, record['signers']))}")
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
              f"{c.get('status')}" for c in record.get("changes", []) if isinstance(c, dict)]
    lines += [f"  note: {note}" for note in record.get("notes", [])]
    # A record is a file anyone may have edited: its text is shown, never obeyed.
    print(printable("\n".join(lines)))
    return 0


def _hosts(record: dict[str, Any]) -> list[dict[str, Any]]:
    """A record's hosts: a list of {host, status, detail} (a dict by label before 2.0)."""
    hosts = record.get("hosts", [])
    if isinstance(hosts, dict):
        return [{"host": {"name": k}, **v} for k, v in sorted(hosts.items())
                if isinstance(v, dict)]
    return [h for h in hosts if isinstance(h, dict)] if isinstance(hosts, list) else []


def _validate_json(path: Path) -> int:
    from cargoship import json_output

    try:
        config = load_config(path, secrets=False, keys=False)  # offline, like validate
    except ConfigError as exc:
        json_output.emit(json_output.validate(path, None, list(exc.problems)))
        raise
    json_output.emit(json_output.validate(path, config, []))
    return 0


def _signature_lines(plan: Plan, path: Path, allowed: Path | None = None,
                     folder: Path | None = None) -> list[str]:
    from planner.plan import detached, signing
    from planner.plan.codec import plan_digest

    """Each signature by its key, and whom it is from only where an allowed-signers file
    says so: a key's comment is whatever its maker typed, never an identity."""
    if allowed is not None and not allowed.is_file():
        raise CargoshipError(f"{allowed}: no such allowed-signers file")
    digest = plan_digest(plan)
    # Detached signatures beside the plan count as much as embedded ones: show them too.
    found = plan.signatures + tuple(detached.read(plan, digest, folder or path.parent))
    if not found:
        return ["Signatures: none"]
    lines = [f"Signatures ({len(found)}):"]
    for signature in found:
        if allowed is None:
            check = signing.check_signature(digest, signature)
            verdict = ("well formed, by an unverified key (not checked against an "
                       "allowed-signers file: show --allowed-signers FILE)") if check.valid \
                else f"INVALID: {check.reason}"
        else:
            check = signing.verify(digest, signature, allowed)
            verdict = f"valid and trusted: {check.principal} (per {allowed})" if check.valid \
                else f"NOT TRUSTED: {check.reason}"
        lines.append(f"  key {signature.key}, signed {signature.signed_at}: {verdict}")
    return lines


def _show(args: argparse.Namespace) -> int:
    from planner.plan import codec
    from planner.render import render_markdown, split_markdown

    raw = codec.read_bytes(args.plan)  # one read: what is shown is what was checked
    record = _as_record(raw)
    if record is not None:
        return _show_record(record, args.json)
    plan = codec.loads(raw, args.plan)
    if args.json:
        sys.stdout.write(codec.dumps(plan))
    elif args.markdown and args.split_dir:
        text = render_markdown(plan, _view(args)) + "\n" + "\n".join(
            _signature_lines(plan, args.plan, args.allowed_signers, args.signatures)) + "\n"
        _mkdir(args.split_dir)
        for number, part in enumerate(split_markdown(text), 1):
            atomic_write(args.split_dir / f"plan-{number}.md", part.encode())
            print(args.split_dir / f"plan-{number}.md")
        return 0
    elif args.markdown:
        sys.stdout.write(render_markdown(plan, _view(args)))
    else:
        _print_plan(args, plan)
    if not args.json:
        lines = _signature_lines(plan, args.plan, args.allowed_signers, args.signatures)
        if args.markdown:
            lines = [f"- {line.strip()}" if line.startswith("  ") else line for line in lines]
        sys.stdout.write("\n" + "\n".join(lines) + "\n")
    return 0


def _mkdir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LocalFileError(f"cannot create directory {path}: {exc.strerror or exc}") from None


def _view(args: argparse.Namespace, color: bool = False) -> View:
    """Compact unless asked: `plan --verbose`, `show --full`; diffs with `--diff`."""
    from planner.render.text import View

    return View(full=bool(getattr(args, "full", False) or (
                    args.command in ("plan", "engine-config-sync")
                    and getattr(args, "verbose", False))),
                diff=bool(getattr(args, "diff", False)), color=color)


def _print_plan(args: argparse.Namespace, plan: Plan) -> None:
    from planner.render.text import render_text

    color = not args.no_color and "NO_COLOR" not in os.environ and sys.stdout.isatty()
    sys.stdout.write(render_text(plan, _view(args, color)))
