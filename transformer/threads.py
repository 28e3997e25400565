"""The default number of CPU threads: the CPUs that are idle when a command starts.

PyTorch starts one thread per core. Beside another busy process that is the slowest choice: each
parallel region waits for its slowest thread, and a thread sharing its core with a busy process
runs a fraction of the time, so two threads on two cores with one busy neighbour are several times
slower than one thread (docs/performance.md, "Threads", has the table). So the commands count the
CPUs nobody else is using: the kernel's idle time of each CPU this process may run on, over the
time between the package's import (before torch loads) and the moment the command chooses, with
this process's own CPU time counted as free (it is ours). Where that cannot be read (no
/proc/stat), every CPU this process may use.

This module imports nothing heavy, so that its snapshot is taken before torch loads.
"""

from __future__ import annotations

import os
import resource
import time

MAX_THREADS = 1024  # torch crashes far beyond the cores a machine has (set_num_threads(100000) segfaults)
MIN_WINDOW = 0.2  # seconds of observation needed for a count to mean something (a clock tick is 10 ms)
MARGIN = 0.25  # a neighbour using under a quarter of a CPU does not cost a thread; more does


def _allowed_cpus() -> set[int]:
    try:
        return os.sched_getaffinity(0)
    except (AttributeError, OSError):  # not Linux
        return set(range(os.cpu_count() or 1))


def _idle_ticks(cpus: set[int]) -> int | None:
    """Idle + iowait clock ticks summed over ``cpus`` since boot, or None where /proc/stat is unreadable."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            lines = f.readlines()
    except OSError:
        return None
    total = 0
    for line in lines:
        name, *fields = line.split()
        if name.startswith("cpu") and name != "cpu" and int(name[3:]) in cpus:
            total += int(fields[3]) + int(fields[4])
    return total


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _Snapshot:
    def __init__(self) -> None:
        self.cpus = _allowed_cpus()
        self.wall = time.monotonic()
        self.idle = _idle_ticks(self.cpus)
        self.own = _own_cpu_seconds()


_START = _Snapshot()


def free_cpus(since: _Snapshot | None = None) -> float:
    """How many of this process's CPUs were free (idle, or running this process) since ``since``.

    Waits until at least ``MIN_WINDOW`` seconds have passed since the snapshot. Returns the number
    of CPUs this process may use where idle time cannot be read.
    """
    start = since or _START
    if start.idle is None:
        return float(len(start.cpus))
    remaining = MIN_WINDOW - (time.monotonic() - start.wall)
    if remaining > 0:
        time.sleep(remaining)
    idle, own, wall = _idle_ticks(start.cpus), _own_cpu_seconds(), time.monotonic()
    window = wall - start.wall
    tick = os.sysconf("SC_CLK_TCK")
    free = ((idle - start.idle) / tick + (own - start.own)) / window
    return max(0.0, min(float(len(start.cpus)), free))


def default_threads() -> int:
    """The threads a command uses when neither ``--threads`` nor ``OMP_NUM_THREADS`` says: the free CPUs
    since the package was imported (at least 1, at most the CPUs this process may use)."""
    limit = len(_START.cpus)
    return max(1, min(limit, int(free_cpus() + MARGIN)))
