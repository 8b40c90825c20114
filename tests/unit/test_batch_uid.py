"""A batch asks the user's uid once for all its facts (planner/hosts/batch.py UID), and a
fact run alone still asks itself: run for real with sh, as whoever runs the tests."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from planner.facts.lock_holder import LOCK
from planner.facts.system import PRIVILEGE, as_root
from planner.hosts.batch import UID, Batch, Fact, Output


def run(script: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30,
                          env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_one_uid_for_every_fact_of_a_batch() -> None:
    echo_root = Fact("root echo", as_root("echo from-root"), lambda out: out.stdout)
    batch = Batch.of([PRIVILEGE, LOCK, echo_root])
    script = batch.script()
    assert script.count("id -u") == 1 + 3  # asked once; each fact's fallback never runs
    assert script.splitlines()[1].startswith("cs_uid=; while read")
    privilege, lock, root = batch.split(run(script))
    assert PRIVILEGE.parse(privilege).uid == os.getuid()
    LOCK.parse(lock)
    if os.getuid() == 0:
        assert root.stdout == "from-root\n"


def test_the_uid_is_read_without_starting_id_and_with_it_where_proc_is_not(
        tmp_path: Path) -> None:
    # An `id` on the PATH that answers wrong: the batch's answer must not be its, unless
    # /proc/self/status cannot be read.
    fake = tmp_path / "id"
    fake.write_text("#!/bin/sh\necho 4242\n")
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}"}
    batch = Batch.of([PRIVILEGE])
    script = batch.script().replace("export LC_ALL=C PATH=", "export LC_ALL=C PATH=$PATH:")
    (privilege,) = batch.split(run(script, env))
    assert PRIVILEGE.parse(privilege).uid == os.getuid()
    (privilege,) = batch.split(run(script.replace("/proc/self/status", str(tmp_path / "x")),
                                   env))
    assert PRIVILEGE.parse(privilege).uid == 4242


def test_a_batch_without_such_facts_asks_nothing() -> None:
    assert "id -u" not in Batch.of([Fact("x", "echo x", lambda o: o)]).script()


def test_a_fact_run_alone_asks_its_uid_itself() -> None:
    out = run(PRIVILEGE.command, env={"PATH": os.environ["PATH"]})
    assert PRIVILEGE.parse(Output(out, 0)).uid == os.getuid()
    assert UID in PRIVILEGE.command
