"""The `cargoship` command.

Exit codes: 0 success, 1 error (one line per problem on stderr, never a traceback),
130 interrupted.

Each subcommand is a row of COMMANDS: its help, its arguments (cargoship/arguments.py)
and its handler, which gets the parsed arguments and returns the exit code.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from cargoship import arguments, lost_interrupts
from cargoship.apply_command import apply, sign
from cargoship.completion import SHELLS
from cargoship.habits import config_path, did_you_mean, setup_logging, terraform_hint, to_devnull
from cargoship.plan_command import plan
from cargoship.show_command import show
from executor.errors import ApplyInterrupted
from planner import __version__
from planner.errors import CargoshipError, ConfigError
from planner.render import printable

# What a plan needs only once its hosts' handshakes have begun is imported where it is used,
# so that it loads while they run (planner/make.py); other commands pay only for what they
# use too: the handlers import their heavy modules inside.


def _validate(args: argparse.Namespace) -> int:
    from cargoship import housekeeping

    if args.json:
        return housekeeping.validate_json(args.config)
    return housekeeping.validate(args.config)


def _history(args: argparse.Namespace) -> int:
    from cargoship import housekeeping

    return housekeeping.history_command(args.config, args.json, args.allowed_signers)


def _force_unlock(args: argparse.Namespace) -> int:
    from cargoship import housekeeping

    return housekeeping.force_unlock_command(args.config, args.lock_id, args.confirm)


def _signature_policy(args: argparse.Namespace) -> int:
    from cargoship.policy_command import signature_policy_command

    return signature_policy_command(args.config, args.allowed_signers, args.min_signatures,
                                    args.approvals, args.confirm)


def _schema(args: argparse.Namespace) -> int:
    import schemas

    name = "plan.schema.json" if args.plan else schemas.CLUSTER_SCHEMA
    sys.stdout.write(json.dumps(schemas.load(name), indent=2) + "\n")
    return 0


def _completion(args: argparse.Namespace) -> int:
    sys.stdout.write(SHELLS[args.shell](build_parser()))
    return 0


@dataclass(frozen=True)
class Command:
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]  # its own, after -c and the globals
    handler: Callable[[argparse.Namespace], int]  # the parsed arguments -> the exit code
    config: bool = True  # takes -c/--config, resolved (config_path) before the handler runs


# In the order `cargoship --help` lists them.
COMMANDS: dict[str, Command] = {
    "plan": Command("Read every host (read-only) and report what engine-config-sync would "
                    "do.", arguments.plan, plan),
    "engine-config-sync": Command("Sync the engine config; with --dry-run, report only.",
                                  arguments.engine_config_sync, plan),
    "show": Command("Render a saved plan (checks its schema and digest first); offline.",
                    arguments.show, show, config=False),
    "validate": Command("Check the cluster config (schema and consistency); no connections.",
                        arguments.validate, _validate),
    "apply": Command("Apply exactly a saved plan: lock, drift check, roll out, record.",
                     arguments.apply, apply, config=False),
    "sign": Command("Add your SSH signature to a plan (over its digest).", arguments.sign,
                    sign, config=False),
    "schema": Command("Print the JSON Schema of the cluster config (for editors) or of the "
                      "plan file.", arguments.schema, _schema, config=False),
    "completion": Command("Print a shell completion script.", arguments.completion,
                          _completion, config=False),
    "history": Command("List the plans applied to the hosts (from their apply records), and "
                       "whether the hosts still match.", arguments.history, _history),
    "signature-policy": Command("Show, set or replace the signature policy every apply of "
                                "the cluster enforces (kept on its controllers).",
                                arguments.signature_policy, _signature_policy),
    "force-unlock": Command("Remove the lock a crashed run left behind.",
                            arguments.force_unlock, _force_unlock),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse's default prints usage over several lines; keep it to one line + hint.
        hint = did_you_mean(build_parser(), message, None)
        self.exit(1, f"cargoship: error: {message}{hint} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="cargoship", description="Keep the engine config of RKE2 and k3s "
                     "clusters in sync across every host, plan first.")
    parser.add_argument("--version", action="version", version=f"cargoship {__version__}")
    arguments.global_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, command in COMMANDS.items():
        p = sub.add_parser(name, help=command.help, description=command.help,
                           epilog=arguments.EXAMPLES[name],
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        if command.config:
            arguments.config_option(p)
        arguments.global_options(p, top=False)
        command.arguments(p)
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


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr)
    except OSError:
        to_devnull()


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
    with _interrupts_raise():
        return _main(args)


@contextmanager
def _interrupts_raise() -> Iterator[None]:
    """SIGTERM (CI cancelling, `timeout`) and SIGHUP (the terminal closed) end any command
    as Ctrl-C does, with its message and 128 + the signal; apply's rollout takes them over.
    A signal the command was started ignoring stays ignored, as Python leaves an ignored
    SIGINT: `nohup cargoship apply ...` outlives its terminal, and a script's background
    job is not stopped by the Ctrl-C meant for the script. The handlers go back as found
    when main() returns (a caller in-process keeps its own)."""
    taken = {signum: signal.signal(signum, _raise_interrupt)
             for signum in (signal.SIGTERM, signal.SIGHUP)
             if signal.getsignal(signum) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for signum, previous in taken.items():
            signal.signal(signum, previous)


def _main(args: argparse.Namespace) -> int:
    lost_interrupts.install()  # one raised inside a weakref callback is sent again
    # `kill -USR1 <pid>`: every thread's stack on stderr, the command going on. A command
    # that seems stuck tells where without being stopped (tests/reliability ask it so).
    try:
        faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)
    except (OSError, ValueError):  # stderr is no file (main() called in-process)
        pass
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
        return _interrupted(args, exc)
    except Exception as exc:
        # A signal that lands while a module is imported can come wrapped: Python 3.11
        # wraps what a dataclass field's __set_name__ raises in a RuntimeError.
        interrupt = _cause_of_kind(exc, KeyboardInterrupt)
        if interrupt is not None:
            return _interrupted(args, interrupt)
        logging.getLogger("cargoship").debug("internal error", exc_info=True)
        print(f"error: internal error: {type(exc).__name__}: {printable(str(exc))} (run with "
              "-v for details)",
              file=sys.stderr)
        return 1


def _interrupted(args: argparse.Namespace, exc: KeyboardInterrupt) -> int:
    # A plan never changes anything; an apply outside its rollout (which handles Ctrl-C
    # itself) is interrupted before or after any change, its locks released on the way.
    changed = "" if args.command in ("apply", "engine-config-sync") else \
        "; nothing was changed on any host"
    _say(f"interrupted{changed}")
    return 128 + int(getattr(exc, "signum", signal.SIGINT))


def _cause_of_kind(exc: BaseException, kind: type[KeyboardInterrupt]
                   ) -> KeyboardInterrupt | None:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _dispatch(args: argparse.Namespace) -> int:
    command = COMMANDS[args.command]
    if command.config:
        args.config = config_path(args.config)
    return command.handler(args)
