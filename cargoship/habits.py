"""Command-line habits people bring from Terraform and other tools: global options after
the subcommand, a default config file, "did you mean", Terraform's flag names, quiet
logging of third-party libraries."""

from __future__ import annotations

import argparse
import difflib
import errno
import logging
import os
import re
import sys
from pathlib import Path

from planner.errors import CargoshipError
from planner.localfiles import LocalFileError

DEFAULT_CONFIG = Path("cluster.yaml")
CONFIG_ENV = "CARGOSHIP_CONFIG"

# Terraform's spelling -> cargoship's.
TERRAFORM_FLAGS = {"-auto-approve": "--confirm", "--auto-approve": "--confirm",
                   "-lock-timeout": "--lock-timeout", "-detailed-exitcode": "--detailed-exitcode"}


def terraform_hint(argv: list[str]) -> str | None:
    for arg in argv:
        flag = arg.split("=", 1)[0]
        if flag in TERRAFORM_FLAGS:
            return (f"cargoship: error: {flag} is Terraform's spelling; cargoship's is "
                    f"{TERRAFORM_FLAGS[flag]}")
    return None


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return [o for a in parser._actions for o in a.option_strings]


def did_you_mean(parser: argparse.ArgumentParser, message: str, command: str | None) -> str:
    """A hint for argparse's 'invalid choice' and 'unrecognized arguments' errors."""
    commands = _subcommands(parser)
    choice = re.search(r"invalid choice: '([^']*)'", message)
    if choice:
        close = difflib.get_close_matches(choice.group(1), list(commands), n=1, cutoff=0.6)
        return f"; did you mean '{close[0]}'?" if close else ""
    unknown = re.search(r"unrecognized arguments: (.*)", message)
    if not unknown:
        return ""
    known = _options(commands[command]) if command else _options(parser)
    hints = []
    for arg in unknown.group(1).split():
        if arg.startswith("-"):
            close = difflib.get_close_matches(arg.split("=", 1)[0], known, n=1, cutoff=0.6)
            if close:
                hints.append(f"'{close[0]}' for '{arg}'")
    return f"; did you mean {', '.join(hints)}?" if hints else ""


def config_path(given: Path | None) -> Path:
    """-c, else $CARGOSHIP_CONFIG, else ./cluster.yaml, as Terraform reads the current
    directory."""
    if given is not None:
        return given
    from_env = os.environ.get(CONFIG_ENV)
    path = Path(from_env) if from_env else DEFAULT_CONFIG
    if not path.exists():
        where = f"${CONFIG_ENV} ({from_env})" if from_env else \
            f"./{DEFAULT_CONFIG} (the default)"
        raise CargoshipError(f"no cluster config: {where} does not exist; give one with -c FILE "
                             f"or set {CONFIG_ENV}")
    return path


def setup_logging(verbose: bool, log_file: Path | None) -> logging.Handler | None:
    """-v: cargoship's own debug lines on stderr; libraries (paramiko, urllib3, the
    kubernetes client) only from WARNING up, and paramiko not even then: its failed
    connections are reported by cargoship, once, as one line."""
    root = logging.getLogger()
    root.setLevel(logging.WARNING)
    stderr = logging.StreamHandler()
    stderr.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root.addHandler(stderr)
    ours = logging.getLogger("cargoship")
    ours.setLevel(logging.DEBUG if verbose or log_file is not None else logging.INFO)
    stderr.setLevel(logging.DEBUG if verbose else logging.WARNING)
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)
    if log_file is None:
        return None
    try:
        handler = logging.FileHandler(log_file)
    except OSError as exc:
        raise CargoshipError(f"--log-file {log_file}: {exc.strerror}") from None
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    return handler


def check_writable(path: Path) -> None:
    """Refuse an output file that cannot be written, before any host is contacted: a probe
    file created and removed in its directory (os.access says yes to root everywhere)."""
    def refuse(why: str) -> CargoshipError:
        return CargoshipError(f"cannot write {path}: {why}")

    if path.is_dir():
        raise refuse(os.strerror(errno.EISDIR))
    parent = path.parent
    if not parent.is_dir():
        raise refuse(os.strerror(errno.ENOENT))
    probe = parent / f".{path.name}.cargoship-probe-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise refuse(exc.strerror or str(exc)) from None
    os.close(fd)
    os.unlink(probe)
    if path.exists() and not os.access(path, os.W_OK):
        raise refuse(os.strerror(errno.EACCES))


def make_dir(path: Path) -> None:
    """An output directory, with its parents: a failure said in one line."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LocalFileError(f"cannot create directory {path}: {exc.strerror or exc}") from None


def to_devnull() -> None:
    """Point stdout and stderr at /dev/null: their reader (a pipe, a terminal) is gone,
    and neither a later line nor the interpreter's final flush may fail for that."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.dup2(devnull, sys.stderr.fileno())
