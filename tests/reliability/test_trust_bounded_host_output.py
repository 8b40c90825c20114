"""Bounded work on any input, through the real `cargoship` command (issue 25, point 5).

A lab host whose `ufw` prints a rule row padded with a megabyte of blanks held every plan
at 100% CPU (the rule pattern backtracked over every split of the line), whatever the
timeouts; a detached signature file that is a link to /dev/zero was read whole, gigabytes,
before being cut to 64 KiB, and one that is a FIFO blocked `apply` for good. Each now ends
at once with a readable answer naming what it refused.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from planner.plan import codec
from planner.plan.detached import SUFFIX
from tests.e2e.cli import cargoship, cargoship_argv
from tests.lab import HostSpec
from tests.unit.test_plan_codec import sample_plan

pytestmark = pytest.mark.reliability("trust: bounded work on any host output")

# What the lab host's ufw prints: a well-formed header, then one rule row whose columns are
# a megabyte of blanks apart and whose action is no ufw word, so that no split matches.
UFW_HEADER = ("Status: active\\nLogging: on (low)\\n"
              "Default: deny (incoming), allow (outgoing), disabled (routed)\\n"
              "New profiles: skip\\n\\nTo                         Action      From\\n"
              "--                         ------      ----\\n")
UFW_WIDE_ROW = ("#!/bin/sh\n"
                f"printf '{UFW_HEADER}'\n"
                "printf '6443/tcp'\n"
                "head -c 1000000 /dev/zero | tr '\\0' ' '\n"
                "printf 'ALLOWED IN    Anywhere\\n'\n")
# One that does not stop (64 MB of blanks, no newline: what `yes` would be, but finite, so
# that an old cargoship collecting it into a shell variable cannot eat the machine).
UFW_FLOOD = ("#!/bin/sh\n"
             f"printf '{UFW_HEADER}'\n"
             "head -c 64000000 /dev/zero | tr '\\0' ' '\n")
PLAN_TIMEOUT = 60


def _install_ufw(lab, script: str) -> None:  # type: ignore[no-untyped-def]
    # /usr/local/bin is on the PATH the firewall listing runs with, ahead of /usr/sbin.
    lab.exec("ctl-1", "cat > /usr/local/bin/ufw && chmod 0755 /usr/local/bin/ufw",
             input=script)


def _readable(result: subprocess.CompletedProcess[str]) -> None:
    """No line of what the command printed is anywhere near the host's megabyte."""
    longest = max((len(line) for line in (result.stdout + result.stderr).splitlines()),
                  default=0)
    assert longest < 1000, f"a line of {longest} characters"


def test_plan_ends_on_a_megabyte_of_blanks_from_ufw(lab_factory) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller")])
    address = lab.hosts[0].address
    _install_ufw(lab, UFW_WIDE_ROW)
    started = time.monotonic()
    wide = cargoship("plan", "-c", lab.dir / "cluster.yaml", timeout=PLAN_TIMEOUT)
    took = time.monotonic() - started
    assert wide.returncode == 1, wide.stdout + wide.stderr
    assert (f"x ctl-1 ({address}): Validate hosts: cannot read the firewall rules: ufw: "
            "line 8 is 1000030 characters long (more than 4096); refused") in wide.stdout
    assert "Problems (1):" in wide.stdout
    _readable(wide)
    print(f"plan with a 1 MB ufw rule row: {took:.1f} s")

    # A ufw that goes on printing: the host's listing stops it at 1 MiB, and the rules of
    # the other firewall tools are still checked.
    _install_ufw(lab, UFW_FLOOD)
    started = time.monotonic()
    flood = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--verbose",
                      timeout=PLAN_TIMEOUT)
    took = time.monotonic() - started
    assert flood.returncode == 0, flood.stdout + flood.stderr
    assert ("could not read ufw rules, ports not checked against them: ufw printed more "
            "than 1 MiB; not read") in flood.stdout
    _readable(flood)
    print(f"plan with a ufw printing 64 MB: {took:.1f} s")


# --- detached signature files -------------------------------------------------------------------


def _capped_cargoship(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The real command, its address space capped at 4 GiB: the old reader read /dev/zero
    until memory ran out, and a regression must not take the machine's with it."""
    # ulimit in a shell that then becomes the command: no preexec_fn in a threaded pytest.
    argv = ["sh", "-c", 'ulimit -v 4194304 && exec "$@"', "sh", *cargoship_argv(),
            *map(str, args)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30,
                            stdin=subprocess.DEVNULL)
    assert "Traceback" not in result.stderr, result.stderr
    return result


@pytest.mark.parametrize(("kind", "said"), [
    ("link to /dev/zero", "is a symbolic link"),
    ("FIFO", "not a regular file"),
    ("directory", "not a regular file"),
    ("64 KiB and a byte", "larger than 64 KiB"),
])
def test_a_hostile_detached_signature_file_is_refused_at_once(tmp_path: Path, kind: str,
                                                                said: str) -> None:
    plan = sample_plan()
    plan_file = tmp_path / "plan.json"
    codec.write(plan, plan_file)
    allowed = tmp_path / "allowed_signers"
    allowed.write_text("")
    signature = tmp_path / f"{plan.plan_id}.mallory{SUFFIX}"
    if kind == "link to /dev/zero":
        signature.symlink_to("/dev/zero")
    elif kind == "FIFO":
        os.mkfifo(signature)
    elif kind == "directory":
        signature.mkdir()
    else:
        signature.write_bytes(b" " * ((64 << 10) + 1))
    for argv in (("apply", plan_file, "--confirm", "--require-signed-by", allowed),
                 ("show", plan_file)):
        started = time.monotonic()
        result = _capped_cargoship(*argv)
        took = time.monotonic() - started
        assert result.returncode == 1, result.stdout + result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert str(signature) in lines[0] and said in lines[0], lines[0]
        assert took < 10, f"{argv[0]} took {took:.1f} s"


# --- a listing a host's program prints without end ------------------------------------------

# An `ip` that prints a well-formed address line, then blanks: 2 MB of them, or without end.
IP_LO = "#!/bin/sh\necho '1: lo inet 127.0.0.1/8 scope host lo'\n"
IP_WIDE = IP_LO + "head -c 2000000 /dev/zero | tr '\\0' ' '\n"
IP_ENDLESS = IP_LO + "exec yes ' '\n"


def test_plan_cuts_a_listing_as_it_arrives_and_ends_a_host_that_prints_without_end(
        lab_factory) -> None:  # type: ignore[no-untyped-def]
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker")])
    worker = lab.hosts[1].address
    # /usr/local/sbin comes first on the PATH every read runs with.
    lab.exec("wrk-1", "cat > /usr/local/sbin/ip && chmod 0755 /usr/local/sbin/ip",
             input=IP_WIDE)
    wide = cargoship("plan", "-c", lab.dir / "cluster.yaml", timeout=PLAN_TIMEOUT)
    assert wide.returncode == 1, wide.stdout + wide.stderr
    assert (f"x {worker}: Gather host facts: unexpected output reading hostname, network: "
            "the network listing: the host printed more than 1 MiB; refused unread"
            ) in wide.stdout, wide.stdout
    assert "Problems (1):" in wide.stdout
    _readable(wide)

    lab.exec("wrk-1", "cat > /usr/local/sbin/ip", input=IP_ENDLESS)
    started = time.monotonic()
    endless = cargoship("plan", "-c", lab.dir / "cluster.yaml", timeout=PLAN_TIMEOUT)
    took = time.monotonic() - started
    assert endless.returncode == 1, endless.stdout + endless.stderr
    assert (f"x {worker}: Gather host facts: remote output exceeded 64 MiB "
            "(reading network)") in endless.stdout, endless.stdout
    assert "Problems (1):" in endless.stdout
    _readable(endless)
    print(f"plan with an ip that prints without end: {took:.1f} s")
