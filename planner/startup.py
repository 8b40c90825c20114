"""What a run paid before it could work on its hosts: wall time since the process started
(the interpreter's own start-up included) and CPU time, at two moments:
- the first dial (`since_process_start`, called as the handshakes begin);
- the phases loaded (`imports_done`): the imports a plan makes while its handshakes run
  belong to start-up too, though they overlap the network's waits.

`plan --stats` prints both and the benchmark reads them: `plan --help` would time imports a
real plan makes only after parsing its arguments, so it proves nothing about them.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Startup:
    wall: float  # seconds since the process started; NaN where /proc cannot say
    cpu: float  # CPU seconds (user + system) the process has used so far
    # The calling thread's CPU seconds at a mark (`marked`): what it spends from there on
    # can be told apart from the handshakes, which run alongside on their own thread.
    thread_cpu: float

    def marked(self) -> Startup:
        """The same figures, with this thread's CPU marked now: for the first dial, once
        every handshake is under way (their setup is per host, not start-up)."""
        return dataclasses.replace(self, thread_cpu=time.thread_time())


def since_process_start() -> Startup:
    cpu, thread_cpu = time.process_time(), time.thread_time()
    return Startup(_wall_since_start(), cpu, thread_cpu)


def imports_done(first_dial: Startup) -> Startup:
    """Start-up with the imports after the first dial: the first dial's figures plus
    what this thread (the one that dialled, then imported) has spent since its mark; the
    handshakes' own CPU in the meantime is not start-up and is left out."""
    thread_cpu = time.thread_time()
    return Startup(_wall_since_start(), first_dial.cpu + thread_cpu - first_dial.thread_cpu,
                   thread_cpu)


def _wall_since_start() -> float:
    try:
        with open("/proc/self/stat") as fh:
            # Fields after the command name (which may hold spaces); starttime is the
            # 22nd field: clock ticks since boot, the clock CLOCK_BOOTTIME reads.
            fields = fh.read().rpartition(")")[2].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        return time.clock_gettime(time.CLOCK_BOOTTIME) - started
    except (OSError, ValueError, IndexError, AttributeError):
        return float("nan")
