"""Who we are on the host (root or sudo) and what time the host thinks it is."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..hosts.batch import UID, Fact, FactParseError, Output, quote
from .bounds import check_size

# Two short lines (`uid N`, `sudo yes|no`) and one time: bounded where they come from
# (`id -u`, the script's own words, `date`), so their commands print them as they are.
_MAX_PRIVILEGE = 1024
_MAX_CLOCK = 256


@dataclass(frozen=True)
class Privilege:
    uid: int
    sudo: bool  # passwordless sudo works (always True for root)

    @property
    def can_write(self) -> bool:
        return self.uid == 0 or self.sudo


def parse_privilege(out: Output) -> Privilege:
    text = check_size(out, _MAX_PRIVILEGE, "the user id")
    fields = dict(line.split(" ", 1) for line in text.splitlines() if " " in line)
    try:
        uid = int(fields["uid"])
    except (KeyError, ValueError):
        raise FactParseError(f"cannot read the user id from {out.stdout.strip()[:60]!r}") from None
    return Privilege(uid, uid == 0 or fields.get("sudo") == "yes")


def parse_epoch(out: Output) -> float:
    text = check_size(out, _MAX_CLOCK, "the clock reading").strip()
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds):  # "nan" and "inf" are floats too: no clock says them
        raise FactParseError(f"unexpected clock reading {text[:40]!r}")
    return seconds


PRIVILEGE: Fact[Privilege] = Fact(
    "privilege",
    # `sudo -n` never prompts: a password prompt would hang a non-interactive run.
    f"u={UID}; echo \"uid $u\"; "
    "if [ \"$u\" != 0 ]; then if sudo -n true >/dev/null 2>&1; then echo 'sudo yes'; "
    "else echo 'sudo no'; fi; fi",
    parse_privilege,
)
CLOCK: Fact[float] = Fact("clock", "date -u +%s.%N", parse_epoch)


def as_root(snippet: str) -> str:
    """Run a snippet as root inside a batch that runs as the SSH user."""
    return (f"if [ \"{UID}\" = 0 ]; then sh -c {quote(snippet)}; "
            f"else sudo -n -- sh -c {quote(snippet)}; fi")
