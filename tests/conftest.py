"""Lab fixtures: real SSH hosts for end-to-end tests (root needed)."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.e2e.cli import LABS_ENV
from tests.kubeapi_server import start_kubeapi  # noqa: F401 - a shared fixture
from tests.lab import HostSpec, Lab, Timing

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root (namespaces)")

# Property tests search at random where people run them (that is how they find bugs: a
# chain line of ':' alone in iptables-save was one), and the same examples every time in
# CI, where a new find must not fail a landing by chance.
# Hypothesis's own timings (a deadline per example, the generation speed check) are wall
# clock: on a loaded 2-core machine they failed tests whose subject was never speed.
# Speed is the benchmark's to judge (tests/bench); hangs are caught by CPU-time guards.
_UNTIMED = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("untimed", **_UNTIMED)
settings.register_profile("ci", derandomize=True, **_UNTIMED)
settings.load_profile("ci" if os.environ.get("CI") else "untimed")


_WEIGHTS = Path(__file__).parent / "file_weights.json"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Where xdist hands out the files (in its workers): the longest first
    (tests/file_weights.json, each file's wall seconds in a whole run), each file's tests
    in their own order, and the workers take them in this order (scripts/test.sh:
    --no-loadscope-reorder; xdist's own order, most tests first, left the few long lab
    files for last, and the run waited on one of them alone). A file not weighed yet goes
    first: it may be long. Anywhere else the files run in the order they were named: the
    mutation suite names the quickest to fail first (with a mutant alive, a slower one
    may take minutes to fail)."""
    if not hasattr(config, "workerinput"):
        return
    try:
        weights: dict[str, float] = json.loads(_WEIGHTS.read_text())
    except (OSError, ValueError):
        return
    unknown = max(weights.values(), default=0.0) + 1
    # A stable sort: each file's tests stay in their order.
    items.sort(key=lambda item: -weights.get(item.nodeid.split("::")[0], unknown))


@pytest.fixture(autouse=True, scope="session")
def _state_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """engine-config-sync --confirm keeps its plans in $XDG_STATE_HOME: a test's, never the
    home of whoever runs the tests (a test may still give its own)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
        yield


# Apply's waits for every `cargoship` a test runs (executor/waits.py): shorter than the
# real ones where a fault test would otherwise wait them out (a host cut off is redialled
# by each step after its failure: the rollback, the record, the lock's touch and release).
# Each stays well above what a loaded 2-core machine needs when nothing is wrong: the
# restart script prints a line every second, a cancelled one ends in well under a second,
# and runit starts a killed sshd again within about a second.
TEST_WAITS = {"silence": 8.0, "cancel_wait": 5.0, "reconnect_factor": 2.0,
              "reconnect_floor": 3.0}


@pytest.fixture(autouse=True, scope="session")
def _test_waits() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CARGOSHIP_TEST_WAITS", json.dumps(TEST_WAITS))
        yield


@pytest.fixture
def lab_factory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                ) -> Iterator[Callable[..., Lab]]:
    """Start labs inside a test; every one is removed when the test ends, pass or fail.
    Their directories are in LABS_ENV while the test runs: a `cargoship` command that
    hangs or is slow is reported with what the hosts run (tests/e2e/cli.py)."""
    if os.geteuid() != 0:
        pytest.skip("the lab needs root (namespaces)")
    labs: list[Lab] = []

    def make(hosts: list[HostSpec], distro: str = "rke2", timing: Timing | None = None,
             kube_api: bool = True, etcd: bool | None = None) -> Lab:
        lab = Lab.up(tmp_path / f"lab{len(labs)}", hosts, distro=distro, timing=timing,
                     kube_api=kube_api, etcd=etcd)
        labs.append(lab)
        monkeypatch.setenv(LABS_ENV, os.pathsep.join(str(one.dir) for one in labs))
        return lab

    yield make
    for lab in labs:
        lab.down()


@pytest.fixture(scope="session")
def healthy_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """3 controllers + 3 workers, rke2, shared by tests that only read it."""
    if os.geteuid() != 0:
        pytest.skip("the lab needs root (namespaces)")
    specs = [HostSpec(f"ctl-{i}", "controller") for i in (1, 2, 3)]
    specs += [HostSpec(f"wrk-{i}", "worker") for i in (1, 2, 3)]
    lab = Lab.up(tmp_path_factory.mktemp("healthy"), specs)
    yield lab
    lab.down()


_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _ignore(signum: int, frame: object) -> None:
    pass


@pytest.fixture(autouse=True, scope="session")
def _children_take_interrupts() -> Iterator[None]:
    """Every child a test starts begins with SIGINT and SIGHUP at their default actions,
    as a command a person types does. A test run started in a script's background or
    under nohup ignores them, its children would inherit that (cargoship keeps a signal
    it was started ignoring ignored, as Python does SIGINT), and the tests that send them
    failed (a run started that way here, 2026-12-05). A handler of Python's own goes back
    to the default at exec; this one does nothing, so this process still ignores them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    ignored = [s for s in (signal.SIGINT, signal.SIGHUP)
               if signal.getsignal(s) is signal.SIG_IGN]
    for signum in ignored:
        signal.signal(signum, _ignore)
    yield
    for signum in ignored:
        signal.signal(signum, signal.SIG_IGN)


def _signal_state() -> tuple[dict[int, object], frozenset[int]]:
    return ({int(s): signal.getsignal(s) for s in _SIGNALS},
            frozenset(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])
                      if s in _SIGNALS))


@pytest.fixture(autouse=True)
def _signals_left_as_found(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test leaves this process's interrupt handling as it found it: a child started
    later inherits an ignored or blocked SIGINT, and a test of Ctrl-C then fails by chance
    (CI, 2026-12-05: `cargoship plan` and the lab's API server each ignored a SIGINT)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = _signal_state()
    yield
    after = _signal_state()
    if after != before:
        handlers, blocked = before
        for signum, handler in handlers.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        signal.pthread_sigmask(signal.SIG_SETMASK, [
            s for s in signal.pthread_sigmask(signal.SIG_BLOCK, []) if s not in _SIGNALS
        ] + sorted(blocked))
        pytest.fail(f"{request.node.nodeid} changed this process's interrupt handling "
                    f"(handlers, blocked): {before} -> {after}")
