"""A stand-in kernel whose module writes to standard output as it is imported, as a library may
(a version warning printed, a line from native code): the trial process imports it before it
answers, and no such line may be read as one of its replies (tests/test_first_run_trial.py)."""

from __future__ import annotations

import os

import trial_kernels as kernels

print("a note printed on stdout as this module is imported", flush=True)
os.write(1, b"a line written to file descriptor 1 by native code\n")


class WrongThenRightAfterNoise(kernels.StandInKernel):
    RUNGS = ("wrong", "right")
