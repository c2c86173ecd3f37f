"""The machine's cores as the throughput experiments read them: the seconds they have been busy,
and a wait, before a set is timed, for the judges' waiting workers to have started.

A judge starts its waiting workers when it starts (each imports torch and makes its device's
context): lanes of one GPU start several judges' at once, which a fixed wait may not cover. A set
timed while they still start is charged their starts, which a service that runs for hours pays
once; so the wait goes on past its minimum until the machine is quiet (its cores busy less than
QUIET_CORES over a second), up to its maximum."""

import os
import time
from pathlib import Path

QUIET_CORES = 1.0


def busy_s() -> float:
    """The CPU seconds every core of the machine has been busy (neither idle nor waiting on I/O)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def settle(minimum_s: float, maximum_s: float) -> tuple[float, bool]:
    """Wait `minimum_s`, then until the machine is quiet or `maximum_s` has passed: the seconds
    waited, and whether it was quiet."""
    started = time.monotonic()
    time.sleep(minimum_s)
    while True:
        before = busy_s()
        time.sleep(1.0)
        if busy_s() - before < QUIET_CORES:
            return time.monotonic() - started, True
        if time.monotonic() - started >= maximum_s:
            return time.monotonic() - started, False
