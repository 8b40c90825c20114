"""The command line's arguments: the global options, and each subcommand's own (one function
per subcommand; cargoship/cli.py's table says which goes with which)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from cargoship.completion import SHELLS

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


def seconds(text: str) -> float:
    """A wait in seconds: a finite number, zero or more (float() alone takes "nan" and
    "inf", and a lock wait of nan seconds would compare false with every clock)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text[:40]!r}"
                                         ) from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds >= 0, got "
                                         f"{text[:40]!r}")
    return value


def global_options(parser: argparse.ArgumentParser, top: bool) -> None:
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


def config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--config", type=Path, metavar="FILE",
                        help="the cluster config (default: $CARGOSHIP_CONFIG, else "
                             "./cluster.yaml)")


def _host_keys(p: argparse.ArgumentParser) -> None:
    p.add_argument("--accept-new-host-keys", action="store_true",
                   help="trust and record host keys never seen before (changed keys are "
                        "always refused)")


def plan(p: argparse.ArgumentParser) -> None:
    _host_keys(p)
    p.add_argument("-out", "--out", type=Path, metavar="PLAN",
                   help="write the plan file (JSON) for a later apply or review")
    p.add_argument("--detailed-exitcode", action="store_true",
                   help="exit 0 when nothing would change, 2 when something would, 1 on error")
    p.add_argument("--json", action="store_true",
                   help="print the plan document (schemas/plan.schema.json) on stdout instead "
                        "of the text for people")
    p.add_argument("--stats", action="store_true",
                   help="also print, per phase, the remote commands run per host, the time "
                        "taken, and this run's CPU time, peak memory and start-up")
    # (The global -v/--verbose also shows every host's preflight detail and the unified
    # diffs here: see show_command.view.)
    p.add_argument("--diff", action="store_true",
                   help="the unified diff under each change's summary by key")


def engine_config_sync(p: argparse.ArgumentParser) -> None:
    _host_keys(p)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--dry-run", action="store_true",
                      help="connect and run the preflight, report the rest, change nothing")
    mode.add_argument("--confirm", action="store_true",
                      help="plan and apply in one run (the plan is kept in "
                           "$XDG_STATE_HOME/cargoship/plans/, by default "
                           "~/.local/state/cargoship/plans/)")
    p.add_argument("--lock-timeout", type=seconds, default=0.0, metavar="SECONDS",
                   help="wait this long for another run's lock")


def _plan_file(p: argparse.ArgumentParser) -> None:
    p.add_argument("plan", type=Path, metavar="PLAN", help="a plan file from plan -out")


def show(p: argparse.ArgumentParser) -> None:
    _plan_file(p)
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="the plan as JSON, for machines")
    fmt.add_argument("--markdown", action="store_true", help="markdown for a pull request")
    p.add_argument("--full", action="store_true",
                   help="every host's preflight detail and the unified diffs")
    p.add_argument("--diff", action="store_true",
                   help="the unified diff under each change's summary by key")
    p.add_argument("--allowed-signers", type=Path, metavar="FILE",
                   help="say which signatures are valid and trusted: by whom, as this "
                        "OpenSSH allowed_signers file names them")
    p.add_argument("--signatures", type=Path, metavar="DIR",
                   help="also check the detached signatures (*.cargoship-sig) in DIR "
                        "(default: beside the plan)")
    p.add_argument("--split-dir", type=Path, metavar="DIR",
                   help="with --markdown: write parts under 65,000 characters to "
                        "DIR/plan-N.md (one pull-request comment each)")


def validate(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true",
                   help="the verdict as JSON (schemas/validate-output.schema.json)")


def apply(p: argparse.ArgumentParser) -> None:
    _plan_file(p)
    p.add_argument("--json", action="store_true",
                   help="the outcome as JSON on stdout (schemas/apply-output.schema.json); "
                        "progress goes to stderr")
    p.add_argument("--confirm", action="store_true",
                   help="apply without asking (otherwise type 'yes' on a terminal)")
    p.add_argument("--lock-timeout", type=seconds, default=0.0, metavar="SECONDS",
                   help="wait this long for another run's lock (default: fail at once)")
    p.add_argument("--require-signed-by", type=Path, metavar="ALLOWED_SIGNERS",
                   help="refuse a plan without enough valid signatures from the signers in "
                        "this OpenSSH allowed_signers file")
    p.add_argument("--min-signatures", type=int, default=1, metavar="N",
                   help="with --require-signed-by: how many different signers (default 1)")
    p.add_argument("--revoked-keys", type=Path, metavar="FILE",
                   help="with --require-signed-by: keys (or a KRL) that no longer count")
    p.add_argument("--signatures", type=Path, metavar="DIR",
                   help="with --require-signed-by: also count the detached signatures "
                        "(*.cargoship-sig) in DIR (default: beside the plan)")


def sign(p: argparse.ArgumentParser) -> None:
    _plan_file(p)
    p.add_argument("--key", type=Path, required=True, metavar="SSH_PRIVATE_KEY",
                   help="the private key to sign with (ssh-agent keys: give the .pub)")
    p.add_argument("--detached", action="store_true",
                   help="leave the plan as it is; write the signature to its own small file "
                        "(PLAN_ID.KEY.cargoship-sig) for a pull request")
    p.add_argument("--sig-dir", type=Path, metavar="DIR",
                   help="with --detached: where to write it (default: beside the plan)")


def schema(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plan", action="store_true", help="the plan file's schema")


def completion(p: argparse.ArgumentParser) -> None:
    p.add_argument("shell", choices=list(SHELLS))


def history(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true",
                   help="as JSON (schemas/history-output.schema.json)")
    p.add_argument("--allowed-signers", type=Path, metavar="FILE",
                   help="verify the signatures the records carry over each plan's digest "
                        "(OpenSSH allowed-signers); without it no signer is shown")


def signature_policy(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allowed-signers", type=Path, metavar="FILE",
                   help="the signers whose signatures count (OpenSSH allowed-signers)")
    p.add_argument("--min-signatures", type=int, metavar="N",
                   help="how many of them every plan needs")
    p.add_argument("--approvals", type=Path, metavar="DIR",
                   help="replacing a policy: *.sig files, the current signers' ssh-keygen -Y "
                        "signatures (namespace cargoship-policy) over the new policy's digest")
    p.add_argument("--confirm", action="store_true",
                   help="write it (otherwise show what would be written)")


def force_unlock(p: argparse.ArgumentParser) -> None:
    p.add_argument("lock_id", metavar="LOCK_ID", help="the id of the lock to remove")
    p.add_argument("--confirm", action="store_true",
                   help="remove without asking (otherwise type 'yes' on a terminal)")
