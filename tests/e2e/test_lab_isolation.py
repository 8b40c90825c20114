"""A lab host shares nothing writable with the machine or another host (tests/lab/init.sh),
as separate machines share nothing: root on one host must gain nothing beyond it. Before
this, a program planted in one host's /usr/local/sbin was the machine's own, so every host
and the machine ran it."""

from __future__ import annotations

import shlex
from pathlib import Path

from tests.lab import HostSpec

CHECKOUT = Path(__file__).resolve().parents[2]
# Places root on a host could try to plant something: the machine's PATH directories, the
# top level, the checkout and the lab's own directories, shared memory, mount points.
PLACES = ("/usr/local/sbin", "/usr/sbin", "/usr/lib", "/opt", "/srv", "/", "/mnt", "/media",
          "/dev/shm", "/boot", "/home", "/etc", "/var/lib", "/root", "/tmp", "/run")


def test_what_root_writes_on_one_host_is_seen_by_no_other_host_nor_the_machine(
        lab_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker")])
    targets = [f"{d.rstrip('/')}/planted-by-wrk-1" for d in PLACES]
    targets += [f"{CHECKOUT}/planted-by-wrk-1", f"{lab.dir}/planted-by-wrk-1",
                f"{lab.host('ctl-1').dir}/planted-by-wrk-1"]
    script = "; ".join(f"touch {shlex.quote(t)} 2>/dev/null && echo {shlex.quote(t)}"
                       for t in targets) + "; true"
    written = lab.exec("wrk-1", script).stdout.split()
    # Writable on the host itself where a real machine is (its own /usr, /tmp...) ...
    assert "/usr/local/sbin/planted-by-wrk-1" in written
    assert "/tmp/planted-by-wrk-1" in written
    # ... but never on the machine, its checkout, the lab's directories or the other host.
    try:
        assert not [t for t in targets if Path(t).exists()]
        seen = lab.exec("ctl-1", "; ".join(f"[ -e {shlex.quote(t)} ] && echo {shlex.quote(t)}"
                                           for t in targets) + "; true").stdout.split()
        assert seen == []
        assert f"{CHECKOUT}/planted-by-wrk-1" not in written
        assert f"{lab.host('ctl-1').dir}/planted-by-wrk-1" not in written
    finally:
        for t in targets:  # a failure must not leave anything planted on the machine
            Path(t).unlink(missing_ok=True)
