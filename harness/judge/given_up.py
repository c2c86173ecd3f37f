"""What the judge gives up when a worker's GPU work never ends behind its reply, kept for the life
of the judge's process.

A queue of the judge's waiting on such a worker's done event never runs again, and a launch behind
that wait can hold its thread in the driver for good: the worker's death releases nothing. Calls
that wait on the whole device can then wait with it (tests/test_giving_up_a_queue.py probes which):
a kernel's first launch (loading its module) holds its thread, and an allocation's out-of-memory
retry (its cudaFree of cached blocks) can. So once a queue is given up,
what it reads and writes, the run's memory pool and every worker mapping are kept here instead of
freed; no later case runs in the process (harness/judge/modes.py); and the process ends without the
interpreter's teardown (`end_process`).
"""

import contextlib
import os
import sys
import traceback
from typing import NoReturn

_queues: list[tuple] = []  # each given-up queue with what it reads and writes
_kept: list = []  # what would have been freed or closed after a queue was given up


def give_up(queue, *held) -> None:
    _queues.append((queue, *held))


def any_given_up() -> bool:
    return bool(_queues)


def keep_or(thing, release) -> None:
    """`release()` where no queue was given up; otherwise `thing` kept, never released."""
    if _queues:
        _kept.append(thing)
    else:
        release()


def end_process(status: int) -> NoReturn:
    """The process's end with `status`; where a queue was given up, its output flushed and the
    process ended at once, without the teardown that would wait on the device."""
    if _queues:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(status)
    sys.exit(status)


def end_on_own_error() -> None:
    """Called while the judge's own error is handled: where a queue was given up, the error shown
    and the process ended at once (status 1); otherwise nothing, for the caller to raise it."""
    if _queues:
        traceback.print_exc()
        end_process(1)
