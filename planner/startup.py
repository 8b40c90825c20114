"""What a run paid before it could dial its first host: wall time since the process
started (the interpreter's own start-up and every import included) and CPU time so far.

`plan --stats` prints it and the benchmark reads it: `plan --help` would time imports a
real plan makes only after parsing its arguments, so it proves nothing about them.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Startup:
    wall: float  # seconds since the process started; NaN where /proc cannot say
    cpu: float  # CPU seconds (user + system) the process has used so far


def since_process_start() -> Startup:
    cpu = time.process_time()
    try:
        with open("/proc/self/stat") as fh:
            # Fields after the command name (which may hold spaces); starttime is the
            # 22nd field: clock ticks since boot, the clock CLOCK_BOOTTIME reads.
            fields = fh.read().rpartition(")")[2].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        wall = time.clock_gettime(time.CLOCK_BOOTTIME) - started
    except (OSError, ValueError, IndexError, AttributeError):
        wall = float("nan")
    return Startup(wall, cpu)
