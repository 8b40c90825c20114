"""After a fault: is every host consistent, and was anything lost?

The fault tests call `check()` on every host once cargoship has ended (or been killed). It
looks at the hosts the way an operator would, not through cargoship's own code:

* each managed file holds its old or its new content in full, never anything else;
* where the new content replaced old content, a backup with the old content exists;
* no cargoship temp file is left beside a managed file;
* the engine is running, and its node is Ready and schedulable (unless the test says the
  output admitted otherwise for that host);
* no lock is held by a live cargoship process;
* a fresh `cargoship plan` lists exactly the managed files that still differ.

A partial file or a missing backup counts as lost data; the other findings are problems.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tests.e2e.cli import cargoship
from tests.lab import Lab

BACKUPS = "/var/lib/cargoship/backups"
LOCK = "/run/cargoship/lock"


@dataclass(frozen=True)
class Managed:
    """A file cargoship manages on a host: what it held before, and what the plan wants."""
    host: str
    path: str
    old: str | None  # None: the file did not exist
    new: str


@dataclass
class Verdict:
    problems: list[str] = field(default_factory=list)
    lost: int = 0  # partial files and missing backups

    def lose(self, what: str) -> None:
        self.lost += 1
        self.problems.append("LOST: " + what)

    def __bool__(self) -> bool:
        return not self.problems


def read(lab: Lab, host: str, path: str) -> str | None:
    result = lab.exec(host, f"cat {shlex.quote(path)}", check=False)
    return result.stdout if result.returncode == 0 else None


def managed_files(lab: Lab, hosts: Iterable[str], path: str, new: str) -> list[Managed]:
    """Snapshot `path` on `hosts` now, before the fault, as the old content."""
    return [Managed(h, path, read(lab, h, path), new) for h in hosts]


def check(lab: Lab, managed: list[Managed], *, config: Path, plan_ids: Iterable[str],
          work: Path, cordoned_ok: Iterable[str] = (), engine_down_ok: Iterable[str] = (),
          gone: Iterable[str] = (), ready_within: float = 30) -> Verdict:
    v = Verdict()
    gone, cordoned_ok, engine_down_ok = set(gone), set(cordoned_ok), set(engine_down_ok)
    plan_ids = list(plan_ids)
    still_differs: set[tuple[str, str]] = set()
    for m in managed:
        if m.host in gone:
            continue
        now = read(lab, m.host, m.path)
        if now not in (m.old, m.new):
            v.lose(f"{m.host}:{m.path} holds neither its old nor its new content "
                   f"({len(now or '')} bytes)")
            continue
        if now != m.new:
            still_differs.add((m.host, m.path))
        elif m.old is not None and m.old != m.new:
            backups = [read(lab, m.host, f"{BACKUPS}/{p}{m.path}") for p in plan_ids]
            if m.old not in backups:
                v.lose(f"{m.host}:{m.path} was replaced and no backup holds the old content")
        directory = os.path.dirname(m.path)
        temps = lab.exec(m.host, f"ls -A {shlex.quote(directory)} 2>/dev/null | "
                                 "grep '^\\.cargoship\\.' || true").stdout.split()
        if temps:
            v.problems.append(f"{m.host}: temp files left in {directory}: {temps}")
    hosts = [h.name for h in lab.hosts if h.name not in gone]
    for host in hosts:
        _check_engine(lab, host, v, down_ok=host in engine_down_ok)
        _check_lock(lab, host, v)
    _check_nodes(lab, [h for h in hosts if h not in engine_down_ok], cordoned_ok, v,
                 ready_within)
    names = {h.address: h.name for h in lab.hosts}
    _check_fresh_plan(config, work, managed, still_differs, gone, names, v)
    return v


def _check_engine(lab: Lab, host: str, v: Verdict, down_ok: bool) -> None:
    state = read(lab, host, f"/var/lib/rancher/{lab.distro}/lab-engine.json")
    running = False
    if state:
        pid = json.loads(state)["pid"]
        running = lab.exec(host, f"kill -0 {int(pid)}", check=False).returncode == 0
    if not running and not down_ok:
        v.problems.append(f"{host}: the engine is not running")


def _check_lock(lab: Lab, host: str, v: Verdict) -> None:
    text = read(lab, host, LOCK)
    if text is None:
        return
    try:
        pid = int(json.loads(text)["pid"])
    except (ValueError, KeyError, TypeError):
        v.problems.append(f"{host}: unreadable lock file left: {text[:80]!r}")
        return
    try:
        os.kill(pid, 0)  # cargoship runs on this machine: is that run still alive?
    except ProcessLookupError:
        return  # stale: a later run may take it over
    status = Path(f"/proc/{pid}/status").read_text() if Path(f"/proc/{pid}").exists() else ""
    if "State:\tZ" not in status:
        v.problems.append(f"{host}: lock held by live process {pid}")


def _check_nodes(lab: Lab, hosts: list[str], cordoned_ok: set[str], v: Verdict,
                 within: float) -> None:
    # A node restarted just now reports Ready on its next heartbeat: poll, with a deadline.
    deadline = time.monotonic() + within
    while True:
        nodes = {n["metadata"]["name"]: n for n in lab.api("GET", "/api/v1/nodes")["items"]}
        ready = lab.ready_nodes()
        bad = [f"{h}: node not Ready" for h in hosts if h not in ready]
        bad += [f"{h}: node left cordoned" for h in hosts if h not in cordoned_ok
                and nodes.get(h, {}).get("spec", {}).get("unschedulable")]
        if not bad or time.monotonic() > deadline:
            v.problems.extend(bad)
            return
        time.sleep(0.2)


def _check_fresh_plan(config: Path, work: Path, managed: list[Managed],
                      still_differs: set[tuple[str, str]], gone: set[str],
                      names: dict[str, str], v: Verdict) -> None:
    out = work / f"fresh-{time.monotonic_ns()}.json"
    result = cargoship("plan", "-c", config, "-out", out)
    if not out.exists():
        # The plan's own problems are on its stdout, after "Problems (N):".
        _, found, problems = result.stdout.partition("\nProblems (")
        said = f"Problems ({problems.strip()}" if found else result.stdout.strip()[-1500:]
        v.problems.append(f"fresh plan failed ({result.returncode}): {said}\n"
                          f"{result.stderr.strip()}")
        return
    plan = json.loads(out.read_text())
    paths = {m.path for m in managed}
    # Plans name hosts as {name, address, port}: map them back to lab host names.
    listed = {(names.get(c["host"]["address"], c["host"]["name"]), c["target"])
              for c in plan["changes"] if c["host"] is not None and c["target"] in paths}
    listed = {(h, p) for h, p in listed if h not in gone}
    if listed != still_differs:
        v.problems.append(f"fresh plan lists {sorted(listed)} but the hosts differ at "
                          f"{sorted(still_differs)}")
