"""How long apply waits for things, and how often it looks: one object, passed down.

Every value is in seconds and its default is the real one; the `cargoship` command always
runs with the defaults (`DEFAULT`). The cluster config's own waits (connect and command
timeouts, drain and ready timeouts) are the user's and stay in the config; these are the
ones a user has no reason to set.

Tests need shorter ones, or a fault test waits out a 15 s silence through a subprocess.
They get them through `from_environment`: `CARGOSHIP_TEST_WAITS`, a JSON object of field
names to seconds. Why that channel is safe:

- nobody stumbles on it: it is honoured only together with `PYTEST_CURRENT_TEST`, which
  pytest sets while a test runs; set without it, the command refuses to run (so nobody
  believes it took effect) rather than ignoring it;
- it can only shorten: a value above its default (or not above zero) is refused;
- shortening any of these never lets something go ahead that would have waited: each is
  a wait that ends in giving up (a connection counted lost, a host rolled back, a node
  left cordoned, a script given up on) or a pause between looks. Waits where shorter is
  less safe are not here: a host lock's staleness (planner.facts.lock_holder.STALE_AFTER)
  decides when another run may take a lock over.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from planner.errors import CargoshipError

ENV = "CARGOSHIP_TEST_WAITS"
UNDER_TEST = "PYTEST_CURRENT_TEST"


@dataclass(frozen=True)
class Waits:
    # Without a line from a restart script for this long (it prints one at least every
    # second while it waits), its connection counts as lost: a cut cable sends no reset.
    silence: float = 15.0
    # A cancelled restart script is given this long to end on its host (removing what it
    # staged); also a finished host's script, to run its last command.
    cancel_wait: float = 10.0
    # How often a wait looks whether it was interrupted a second time.
    abort_poll: float = 0.5
    # The longest pause between two looks at a host coming back (readiness.py).
    ready_poll_cap: float = 1.0
    # A failing uncordon of a host that came back is retried this long.
    uncordon_timeout: float = 60.0
    # A writer that lost its connection redials for max(factor x the connect timeout,
    # floor): long enough for an sshd restart, short enough that a dead host stops the
    # rollout.
    reconnect_factor: float = 3.0
    reconnect_floor: float = 5.0
    # Between eviction attempts a PDB blocks (429), and between looks at evicted pods.
    drain_retry: float = 2.0
    # Between fresh reads of a node coming back, besides its watch: a watch through an API
    # server whose etcd member hangs goes silent rather than failing, and a fresh read is
    # handed to another controller's API server when that one cannot answer.
    fresh_node_every: float = 2.0

    def reconnect_window(self, connect_timeout: float) -> float:
        return max(self.reconnect_factor * connect_timeout, self.reconnect_floor)


DEFAULT = Waits()


def from_environment(env: Mapping[str, str] | None = None) -> Waits:
    """DEFAULT, or the shorter waits a test asked for (see the module docstring)."""
    env = os.environ if env is None else env
    given = env.get(ENV)
    if given is None:
        return DEFAULT
    if not env.get(UNDER_TEST):
        raise CargoshipError(f"{ENV} is for cargoship's own tests (it shortens waits): "
                             "unset it")
    try:
        asked = json.loads(given)
    except ValueError:
        raise CargoshipError(f"{ENV}: not JSON") from None
    if not isinstance(asked, dict):
        raise CargoshipError(f"{ENV}: expected an object of names to seconds")
    known = {f.name for f in fields(Waits)}
    shorter: dict[str, float] = {}
    for name, value in asked.items():
        if name not in known:
            raise CargoshipError(f"{ENV}: unknown wait {name!r}")
        default = getattr(DEFAULT, name)
        if isinstance(value, bool) or not isinstance(value, int | float) or \
                not 0 < value <= default:
            raise CargoshipError(f"{ENV}: {name} must be above 0 and at most its default "
                                 f"{default:g}, got {value!r}")
        shorter[name] = float(value)
    return replace(DEFAULT, **shorter)
